"""Guided decoding under pipeline parallelism (CPU, two stages over gloo): the last stage samples, so its runner
holds the grammar matchers. Guided and unguided requests in one batch give the tokens of one stage, and every
output follows its grammar."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from guided_models import make_tiny_smollm_vocab_model
from pagoda import LLM, SamplingParams
from pagoda.sampling_params import GuidedDecodingParams
from schemas import SCHEMAS

PATTERN = r"[a-z]{2,5}-\d{2}"
CHOICES = ["yes", "no", "maybe so"]


JSON = ("flat", "ref", "array_of_objects", "enum")  # bounded: greedy outputs complete


def _requests() -> list[tuple[str, SamplingParams]]:
    guided = [GuidedDecodingParams(json=SCHEMAS[name]) for name in JSON]
    guided += [GuidedDecodingParams(regex=PATTERN), GuidedDecodingParams(choice=CHOICES), None]
    prompts = ["Describe it:", "A user record:", "Tags, please", "Pick a colour", "Code:", "Answer:", "Once upon a"]
    return [(prompt, SamplingParams(temperature=0, max_tokens=80, guided_decoding=g)) for prompt, g in zip(prompts, guided)]


def _generate(path: str, **kwargs) -> list[tuple[list[int], str, str]]:
    llm = LLM(model=path, dtype="float32", max_model_len=512, kv_cache_memory=64 << 20, max_num_seqs=4,
              max_num_batched_tokens=64, **kwargs)
    try:
        requests = _requests()
        outputs = llm.generate([p for p, _ in requests], [s for _, s in requests], use_tqdm=False)
        return [(list(o.outputs[0].token_ids), o.outputs[0].text, o.outputs[0].finish_reason) for o in outputs]
    finally:
        llm.shutdown()


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return make_tiny_smollm_vocab_model(tmp_path_factory.mktemp("tiny-smollm-vocab-pp"))


def test_guided_requests_under_two_stages_equal_one_stage(model_path) -> None:
    """Seven requests (four JSON schemas, a regex, a choice, one unguided) over four seats, so they run in two
    micro-batches in flight at once: the greedy tokens of pipeline_parallel_size 2 equal those of 1."""
    expected = _generate(model_path)
    got = _generate(model_path, pipeline_parallel_size=2)
    assert [tokens for tokens, _, _ in got] == [tokens for tokens, _, _ in expected]
    texts = [text for _, text, _ in got]
    assert [reason for _, _, reason in got[:6]] == ["stop"] * 6  # each grammar completed, then EOS
    for text, name in zip(texts, JSON):
        jsonschema.validate(json.loads(text), SCHEMAS[name])
    assert re.fullmatch(PATTERN, texts[4]), texts[4]
    assert texts[5] in CHOICES
    assert not re.fullmatch(PATTERN, texts[6]) and texts[6] not in CHOICES  # the unguided one is free text
