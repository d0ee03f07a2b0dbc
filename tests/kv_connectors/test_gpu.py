"""The offload connector on a GPU: blocks move on the platform's transfer stream, beside the compute stream; the
evicted prefix comes back from pinned host memory with the tokens of the engine without offload, for 16-bit and
FP8 caches, with and without CUDA graphs."""

from __future__ import annotations

import pytest

from connector_engines import BLOCK, evicted_prefix_run

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "fp8"])
@pytest.mark.parametrize("enforce_eager", [True, False])
def test_offload_on_the_gpu_equals_no_offload(tiny_llama, kv_cache_dtype, enforce_eager):
    settings = dict(platform="cuda", kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager)
    expected, _, _ = evicted_prefix_run(tiny_llama, **settings)
    got, steps, stats = evicted_prefix_run(tiny_llama, kv_offload_gib=0.001, **settings)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert steps[0] == (64, 5) and stats.kv_connector_loaded_blocks == 64 // BLOCK
