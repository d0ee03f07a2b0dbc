"""The offload connector under tensor parallelism on CPU (two ranks over gloo): each rank moves its own KV heads'
blocks; greedy tokens equal one rank's, and the evicted prefix comes back from host memory on both."""

from __future__ import annotations

from connector_engines import BLOCK, evicted_prefix_run


def test_tp2_with_offload_equals_tp1(tiny_llama):
    expected, steps1, _ = evicted_prefix_run(tiny_llama, kv_offload_gib=0.001)
    got, steps2, stats = evicted_prefix_run(tiny_llama, kv_offload_gib=0.001, tensor_parallel_size=2)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert steps1[0] == steps2[0] == (64, 5)
    assert stats.kv_connector_loaded_blocks == 64 // BLOCK and stats.kv_connector_load_failed_blocks == 0
