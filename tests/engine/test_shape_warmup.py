"""PAGODA_SHAPE_WARMUP=1: eager steps at a grid of token counts and the LM head at every row count run at
start-up, over the first KV blocks; what the engine generates afterwards is unchanged."""

from __future__ import annotations

import logging

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.engine import warmup

BLOCK = 8


def test_grid_is_coarse_and_capped():
    assert warmup.warmup_token_counts(8192)[:3] == [16, 32, 48]
    assert {256, 320, 2048, 2560, 8192} <= set(warmup.warmup_token_counts(8192))
    assert len(warmup.warmup_token_counts(8192)) == 16 + 28 + 12
    assert warmup.warmup_token_counts(100) == [16, 32, 48, 64, 80, 96]


def test_warmup_runs_and_changes_no_output(tiny_models, monkeypatch, caplog):
    path = tiny_models["llama"][0]
    prompts = random_prompts(6, range(5, 40), seed=3)
    params = SamplingParams(temperature=0, max_tokens=12)
    plain = [o.outputs[0].token_ids for o in LLM(model=path, block_size=BLOCK, max_num_batched_tokens=96,
                                                 max_num_seqs=4).generate(prompts, params, use_tqdm=False)]
    monkeypatch.setenv(warmup.ENV, "1")
    calls = []
    monkeypatch.setattr(warmup, "dummy_prefill_metadata",
                        lambda *a, _real=warmup.dummy_prefill_metadata: calls.append(a[:2]) or _real(*a))
    with caplog.at_level(logging.INFO, logger="pagoda"):
        llm = LLM(model=path, block_size=BLOCK, max_num_batched_tokens=96, max_num_seqs=4)
    assert calls == [(t, 1) for t in (16, 32, 48, 64, 80, 96)]  # every count of the grid, within the KV cache
    assert "Warmed up eager steps at 6 token counts (16-96) and the LM head at 1-4 rows" in caplog.text
    warmed = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    assert warmed == plain
