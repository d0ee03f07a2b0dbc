"""The flash kernels with an FP8 KV cache on a real GPU (marked ``gpu``): the csrc KV write stores what
``quantize_kv`` stores, bit for bit; attention over e4m3 / e5m2 caches equals the float64 reference over the
values the cache gives back (stored * scale), for decodes, split-KV, short queries, prefills after cached
prefixes, sliding windows and head sizes 64/128/256; unused cache slots hold NaN (never read); two runs
are bit-identical; a captured decode graph replays as eager."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import make_batch, quantize_batch, reference, rel_error, replay_after_shortening
from pagoda.interfaces.attention import AttentionSpec, KVScales, quantize_kv
from test_flash_gpu_kernels import LONG_DECODES, MIXED, SHORT, TOLS, cuda, poison_unused_slots  # noqa: F401

pytestmark = pytest.mark.gpu
FORMATS = ["fp8", "fp8_e5m2"]


def fp8_spec(kv_dtype: str, heads=32, kv_heads=8, head=128, block=16, dtype=torch.bfloat16, window=None):
    return AttentionSpec(heads, kv_heads, head, head**-0.5, block, dtype, window, kv_cache_dtype=kv_dtype)


def backend_for(cuda, spec: AttentionSpec, k_scale, v_scale, splits=None, short_queries=None):
    from pagoda_attention_flash.backend import FlashAttentionBackend

    scales = KVScales("cuda")
    scales.k_scale.copy_(k_scale), scales.v_scale.copy_(v_scale)
    backend = FlashAttentionBackend(spec, cuda[0]).with_kv_scales(scales)
    backend.force_num_splits = splits
    if short_queries is not None:
        backend.short_query_max = short_queries
    return backend


def run_fp8(cuda, spec: AttentionSpec, seqs, seed: int, splits=None, short_queries=None) -> torch.Tensor:
    """The backend's forward (csrc FP8 KV write, then attention) on a quantized batch, twice: equal runs,
    within the dtype's bound of the float64 reference over the dequantized cache."""
    batch, k_scale, v_scale = quantize_batch(spec, make_batch(spec, seqs, "cuda", seed=seed))
    poison_unused_slots(batch, spec)
    backend = backend_for(cuda, spec, k_scale, v_scale, splits, short_queries)
    outs = []
    for _ in range(2):
        m = backend.prepare(batch.metadata)
        for half in batch.kv_cache:  # this step's slots hold NaN until the KV write
            half.view(-1, spec.num_kv_heads, spec.head_size)[m.slot_mapping.long()] = float("nan")
        outs.append(backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, m))
        torch.cuda.synchronize()
    assert torch.equal(outs[0], outs[1]), "two runs differ: a race or an uninitialised read"
    assert rel_error(outs[0], reference(spec, batch, "cuda")) < TOLS[spec.dtype]
    return outs[0]


@pytest.mark.parametrize("kv_dtype", FORMATS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_csrc_kv_write_stores_what_quantize_kv_stores(cuda, kv_dtype: str, dtype: torch.dtype) -> None:
    spec = fp8_spec(kv_dtype, dtype=dtype)
    g = torch.Generator().manual_seed(3)
    key = (torch.randn(40, 8, 128, generator=g) * 50).to("cuda", dtype)
    value = (torch.randn(40, 8, 128, generator=g) * 5000).to("cuda", dtype)
    cache = torch.zeros(2, 8, 16, 8, 128, dtype=spec.cache_dtype, device="cuda")
    slots = torch.randperm(128, generator=g)[:40].cuda()
    slots[5] = -1
    scales = KVScales("cuda")
    scales.k_scale.fill_(0.07), scales.v_scale.fill_(3.0)
    cuda[0].custom_ops().reshape_and_cache(key, value, cache, slots, scales.k_scale, scales.v_scale)
    ok = slots >= 0
    for half, x, scale in ((0, key, scales.k_scale), (1, value, scales.v_scale)):
        stored = cache[half].view(-1, 8, 128)[slots[ok]]
        assert torch.equal(stored.view(torch.uint8), quantize_kv(x[ok], scale, spec.cache_dtype).view(torch.uint8))


@pytest.mark.parametrize("kv_dtype", FORMATS)
@pytest.mark.parametrize(
    "heads,kv_heads,head,block,window",
    [(32, 32, 64, 16, None), (32, 8, 128, 16, None), (16, 2, 256, 16, None), (32, 8, 128, 16, 512),
     (40, 2, 64, 16, None), (32, 8, 128, 24, None)],
    ids=["mha-d64", "gqa4-d128", "gqa8-d256", "gqa4-window512", "group20-d64", "gqa4-d128-b24"],
)
def test_mixed_batches(cuda, kv_dtype, heads, kv_heads, head, block, window) -> None:
    run_fp8(cuda, fp8_spec(kv_dtype, heads, kv_heads, head, block, window=window), MIXED, seed=heads + head)


@pytest.mark.parametrize("splits", [1, 8, 32])
@pytest.mark.parametrize("head", [64, 128, 256])
def test_split_kv_decode_long_contexts(cuda, splits, head) -> None:
    run_fp8(cuda, fp8_spec("fp8", head=head), LONG_DECODES, seed=11 + head, splits=splits)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_short_queries_and_chunks_after_cached_prefixes(cuda, dtype) -> None:
    spec = fp8_spec("fp8", dtype=dtype)
    run_fp8(cuda, spec, SHORT, seed=3, short_queries=16)
    run_fp8(cuda, spec, [(1, 40), (129, 5000), (64, 700), (2, 2)], seed=4)


def test_fp8_decode_replays_in_a_cuda_graph(cuda) -> None:
    spec = fp8_spec("fp8")
    batch, k_scale, v_scale = quantize_batch(spec, make_batch(spec, [(1, 3000), (1, 100), (1, 5000), (1, 64)], "cuda",
                                                              seed=12))
    backend = backend_for(cuda, spec, k_scale, v_scale, splits=8)
    out, expected, shortened = replay_after_shortening(backend, batch, [1000, 50, 7, 1])
    assert torch.equal(out, expected)
    assert rel_error(expected, reference(spec, shortened, "cuda")) < TOLS[spec.dtype]
