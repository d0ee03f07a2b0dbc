"""Speculative decoding with the n-gram proposer: greedy outputs token-identical to no speculation,
drafts really proposed and accepted, rejected positions' KV blocks released, other requests of the
same steps unchanged."""

from __future__ import annotations

import pytest

from pagoda import LLM, SamplingParams
from pagoda.errors import ConfigError
from tiny_models import random_prompts

SPEC = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}'


def _prompts() -> list[list[int]]:
    base = random_prompts(4, range(6, 14), seed=3)
    return [p * 3 for p in base] + random_prompts(2, range(5, 30), seed=4)  # repeated text: lookups find drafts


def _llm(path: str, spec: str | None) -> LLM:
    return LLM(model=path, skip_tokenizer_init=True, block_size=8, max_num_seqs=8, max_num_batched_tokens=64,
               kv_cache_memory=1 << 20, speculative_config=spec)


def _run(llm: LLM, params: list[SamplingParams]) -> list[list[int]]:
    outs = llm.generate(_prompts(), params, use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_greedy_tokens_equal_without_speculation(tiny_models, family: str) -> None:
    path, _ = tiny_models[family]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (40, 3, 17, 40, 9, 33)]
    plain = _run(_llm(path, None), params)
    llm = _llm(path, SPEC)
    assert _run(llm, params) == plain
    spec = llm.engine.core.speculator
    assert spec.num_drafts > 0 and spec.num_accepted > 0, (spec.num_drafts, spec.num_accepted)
    kv = llm.engine.core.kv_cache
    assert kv.num_free_blocks == kv.num_blocks  # nothing left held by finished requests


def test_sampled_requests_in_the_same_steps_are_unchanged(tiny_models) -> None:
    path, _ = tiny_models["llama"]
    params = [SamplingParams(temperature=0.8, seed=i, max_tokens=20, ignore_eos=True) if i % 2 else
              SamplingParams(temperature=0, max_tokens=20, ignore_eos=True) for i in range(6)]
    assert _run(_llm(path, SPEC), params) == _run(_llm(path, None), params)


def test_stop_tokens_inside_accepted_drafts(tiny_models) -> None:
    path, _ = tiny_models["llama"]
    plain = _run(_llm(path, None), [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)] * 6)
    stops = [row[5] for row in plain]  # a token each greedy output produces (often inside a repeated run)
    params = [SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[s]) for s in stops]
    expected = _run(_llm(path, None), params)
    assert _run(_llm(path, SPEC), params) == expected
    assert all(len(row) <= 6 for row in expected)


def test_rejected_positions_release_their_blocks(tiny_models) -> None:
    path, _ = tiny_models["llama"]
    llm = _llm(path, SPEC)
    core = llm.engine.core
    held_per_step = []
    real_settle = core.speculator.settle

    def settle(req, index, verified):
        result = real_settle(req, index, verified)
        held = len(core.kv_cache.block_ids(req.request_id))
        held_per_step.append((held, -(-req.num_computed_tokens // 8)))
        return result

    core.speculator.settle = settle
    _run(llm, [SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)] * 6)
    assert held_per_step and all(held == needed for held, needed in held_per_step)


def test_bad_configs_are_refused_with_the_fix(tiny_models) -> None:
    path, _ = tiny_models["llama"]
    with pytest.raises(ConfigError, match="num_speculative_tokens"):
        _llm(path, '{"method": "ngram"}')
    with pytest.raises(Exception, match="ngram"):  # an unknown proposer names the registered ones
        _llm(path, '{"method": "medusa", "num_speculative_tokens": 2}')
