"""The offload connector's host tier on CPU: a device cache too small to keep a prefix, so a later request with
that prefix gets its blocks from host memory. Greedy tokens equal the engine without offload, and the step that
admits the later request computes only its tail (asserted from the tokens each step scheduled)."""

from __future__ import annotations

import pytest

from pagoda import SamplingParams

from connector_engines import BLOCK, GREEDY, engine, evicted_prefix_run, prompts


@pytest.mark.parametrize("overlap", [True, False])
def test_host_tier_serves_the_evicted_prefix(tiny_llama, overlap):
    expected, baseline_steps, _ = evicted_prefix_run(tiny_llama, overlap_steps=overlap)
    got, steps, stats = evicted_prefix_run(tiny_llama, overlap_steps=overlap, kv_offload_gib=0.001)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert baseline_steps[0] == (0, 69), "without offload the prefix should have been evicted and recomputed"
    assert steps[0] == (64, 5), "the host tier should supply the 8 prefix blocks: only the 5-token tail is computed"
    assert steps[1:] == [(69 + i, 1) for i in range(GREEDY.max_tokens - 1)]
    assert stats.kv_connector_loaded_blocks == 64 // BLOCK
    assert stats.kv_connector_load_failed_blocks == 0 and stats.kv_connector_save_failures == 0
    assert got[-1].num_cached_tokens == 64


def shared_prefix_batch(path: str, **kwargs):
    """Eight requests sharing a 24-token prefix, on a cache that forces preemptions."""
    prefix = prompts(5, 1, 24)[0]
    batch = [prefix + tail for tail in prompts(6, 8, 12)]
    llm = engine(path, blocks=14, **kwargs)
    try:
        outputs = llm.generate(batch, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True), use_tqdm=False)
        return [o.outputs[0].token_ids for o in outputs], llm.engine.core.snapshot_stats()
    finally:
        llm.shutdown()


def test_offload_under_preemption_equals_no_offload(tiny_llama):
    expected, base = shared_prefix_batch(tiny_llama)
    got, stats = shared_prefix_batch(tiny_llama, kv_offload_gib=0.001)
    assert base.num_preemptions > 0 and stats.num_preemptions > 0, "the small cache should preempt"
    assert got == expected
    assert stats.kv_connector_loaded_blocks > 0, "preempted requests should reload their evicted blocks"


@pytest.mark.parametrize("cache", [{"kv_cache_dtype": "fp8"}, {"dtype": "bfloat16"}], ids=["fp8", "bf16"])
def test_fp8_and_bf16_cache_blocks_round_trip(tiny_llama, cache):
    """Blocks move as bits: with offload, an FP8 or bf16 cache gives the tokens of the same engine without it."""
    expected, _, _ = evicted_prefix_run(tiny_llama, **cache)
    got, steps, stats = evicted_prefix_run(tiny_llama, kv_offload_gib=0.001, **cache)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert steps[0] == (64, 5) and stats.kv_connector_loaded_blocks == 64 // BLOCK
