"""Guided decoding with the embedded SmolLM2 (a real model and tokenizer), sampled at temperature 1."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pagoda import LLM, SamplingParams
from pagoda.sampling_params import GuidedDecodingParams
from schemas import SCHEMAS


@pytest.fixture(scope="module")
def smollm() -> LLM:
    return LLM(max_model_len=1024, kv_cache_memory=64 << 20)


@pytest.mark.slow
def test_smollm_outputs_validate_against_each_of_20_schemas(smollm) -> None:
    """All 20 schemas in one batch, sampled at temperature 1: every output is valid JSON of its schema.
    (Short plain prompts keep the prefill small: the grammar, not the prompt, shapes the output.)"""
    names = sorted(SCHEMAS)
    prompts = [f"A JSON {name.replace('_', ' ')}:" for name in names]
    params = [SamplingParams(temperature=1.0, seed=i, max_tokens=150,
                             guided_decoding=GuidedDecodingParams(json=SCHEMAS[name])) for i, name in enumerate(names)]
    for name, result in zip(names, smollm.generate(prompts, params, use_tqdm=False)):
        out = result.outputs[0]
        assert out.finish_reason == "stop", (name, out.text)
        jsonschema.validate(json.loads(out.text), SCHEMAS[name])
