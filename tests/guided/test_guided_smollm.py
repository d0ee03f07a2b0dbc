"""Guided decoding with the embedded SmolLM2 (a real model and tokenizer), sampled at temperature 1."""

from __future__ import annotations

import json

import jsonschema
import pytest

from pagoda import LLM, SamplingParams
from pagoda.guided.params import GuidedDecodingParams
from schemas import SCHEMAS


@pytest.fixture(scope="module")
def smollm() -> LLM:
    return LLM(max_model_len=1024, kv_cache_memory=64 << 20)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["nested", "ref", "enum", "array"])
def test_smollm_outputs_validate(smollm, name) -> None:
    messages = [{"role": "user", "content": "Reply with a JSON value for this schema: " + json.dumps(SCHEMAS[name])}]
    params = SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=150, guided_decoding=GuidedDecodingParams(json=SCHEMAS[name]))
    for out in smollm.chat(messages, params, use_tqdm=False)[0].outputs:
        assert out.finish_reason == "stop", out.text
        jsonschema.validate(json.loads(out.text), SCHEMAS[name])
