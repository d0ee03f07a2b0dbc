"""The Triton kernels against a float64 reference on random paged batches (CPU: interpreter)."""

from __future__ import annotations

import pytest
import torch

from pagoda.attention.testing import make_batch, reference, rel_error
from pagoda.interfaces.attention import AttentionSpec
from pagoda.platforms.cpu import CpuPlatform
from pagoda_attention_triton.backend import TritonAttentionBackend
from pagoda_attention_triton.kv_write import write_kv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FP32_TOL = 1e-5  # fp32 dots (ieee) and fp32 softmax


class _GpuPlatform(CpuPlatform):
    """The CPU platform's behaviour on the CUDA device (the kernels only read ``device_type``)."""

    device_type = "cuda"

    def device(self) -> torch.device:
        return torch.device("cuda")


PLATFORM = _GpuPlatform() if DEVICE == "cuda" else CpuPlatform()


def spec_of(heads: int, kv_heads: int, head: int, block: int, window: int | None = None, dtype=torch.float32):
    return AttentionSpec(heads, kv_heads, head, head**-0.5, block, dtype, window)


def run_backend(spec: AttentionSpec, batch, splits: int | None = None) -> torch.Tensor:
    backend = TritonAttentionBackend(spec, PLATFORM)
    backend.force_num_splits = splits
    metadata = backend.prepare(batch.metadata)
    return backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, metadata)


def test_kv_write_is_exact_and_skips_padding() -> None:
    spec = spec_of(4, 2, 64, 16)
    batch = make_batch(spec, [(1, 20), (5, 9)], DEVICE, seed=1)
    before = batch.kv_cache.clone()
    slots = batch.metadata.slot_mapping.clone()
    slots[2] = -1  # a padding token
    write_kv(batch.key, batch.value, batch.kv_cache, slots)
    expected = before.clone()
    valid = slots >= 0
    expected[0].view(-1, 2, 64)[slots[valid]] = batch.key[valid]
    expected[1].view(-1, 2, 64)[slots[valid]] = batch.value[valid]
    assert torch.equal(batch.kv_cache, expected)


MIXED = [(1, 37), (1, 5), (1, 64), (9, 9), (7, 40), (1 + 16, 50)]  # decodes, a prompt, cached-prefix chunks


@pytest.mark.parametrize(
    "heads,kv_heads,head,block",
    [(2, 2, 64, 16), (8, 2, 64, 32), (8, 1, 128, 16), (4, 1, 32, 16), (4, 2, 48, 16)],
    ids=["mha-d64-b16", "gqa4-d64-b32", "mqa8-d128-b16", "gqa4-d32-b16", "gqa2-d48-padded"],
)
def test_mixed_prefill_and_decode_batch(heads: int, kv_heads: int, head: int, block: int) -> None:
    spec = spec_of(heads, kv_heads, head, block)
    batch = make_batch(spec, MIXED, DEVICE, seed=head + heads)
    assert rel_error(run_backend(spec, batch), reference(spec, batch)) < FP32_TOL


def test_cache_holds_this_steps_keys_after_forward() -> None:
    spec = spec_of(4, 2, 64, 16)
    batch = make_batch(spec, [(1, 30), (12, 20)], DEVICE, seed=3)
    run_backend(spec, batch)
    slots = batch.metadata.slot_mapping
    assert torch.equal(batch.kv_cache[0].view(-1, 2, 64)[slots], batch.key)
    assert torch.equal(batch.kv_cache[1].view(-1, 2, 64)[slots], batch.value)


@pytest.mark.parametrize("block", [16, 32])
def test_sliding_window(block: int) -> None:
    spec = spec_of(4, 2, 64, block, window=24)
    batch = make_batch(spec, [(1, 90), (1, 10), (20, 70), (140, 160)], DEVICE, seed=block)
    assert rel_error(run_backend(spec, batch), reference(spec, batch)) < FP32_TOL


@pytest.mark.parametrize("splits,window", [(4, None), (8, None), (4, 40)])
def test_split_kv_decode(splits: int, window: int | None) -> None:
    spec = spec_of(8, 1, 64, 16, window=window)
    batch = make_batch(spec, [(1, 300), (1, 3), (1, 129), (5, 70)], DEVICE, seed=splits)
    assert rel_error(run_backend(spec, batch, splits=splits), reference(spec, batch)) < FP32_TOL


VERIFY = [(1, 37), (1, 300), (3, 3), (5, 90), (2, 600), (4, 41)]  # decodes, then 2-5 query tokens (a 3-token prompt)


@pytest.mark.parametrize("splits", [1, 4])
@pytest.mark.parametrize(
    "heads,kv_heads,head,window",
    [(8, 2, 64, None), (8, 1, 128, None), (2, 2, 64, None), (32, 2, 64, None), (4, 2, 64, 24)],
    ids=["gqa4-d64", "mqa8-d128", "mha-d64", "gqa16-d64", "gqa2-window24"],
)
def test_short_queries_take_the_decode_kernel(heads: int, kv_heads: int, head: int, window: int | None,
                                               splits: int) -> None:
    """Sequences of a few query tokens after the decodes (a verify step's k + 1) run on the decode
    kernel, split or not, causal within their tokens."""
    spec = spec_of(heads, kv_heads, head, 16, window=window)
    batch = make_batch(spec, VERIFY, DEVICE, seed=heads + splits)
    backend = TritonAttentionBackend(spec, PLATFORM)
    backend.force_num_splits = splits
    metadata = backend.prepare(batch.metadata)
    assert metadata.extra.short_splits == splits
    out = backend.forward(batch.query, batch.key, batch.value, batch.kv_cache, metadata)
    assert rel_error(out, reference(spec, batch)) < FP32_TOL


def test_longer_queries_take_the_prefill_kernel() -> None:
    from pagoda_attention_triton.decode import SHORT_QUERY

    spec = spec_of(4, 2, 64, 16)

    def plan(query_len: int):
        return TritonAttentionBackend(spec, PLATFORM).prepare(make_batch(spec, [(1, 9), (query_len, 40)]).metadata).extra

    assert plan(SHORT_QUERY).short_splits == 1 and plan(SHORT_QUERY + 1).short_splits == 0
    assert plan(SHORT_QUERY + 1).short_scratch is None


def test_decode_only_batch_and_long_group() -> None:
    spec = spec_of(32, 2, 64, 16)  # 16 q heads per kv head
    batch = make_batch(spec, [(1, 17), (1, 80)], DEVICE, seed=5)
    assert rel_error(run_backend(spec, batch), reference(spec, batch)) < FP32_TOL


@pytest.mark.parametrize("dtype,tol", [(torch.float16, 2e-3), (torch.bfloat16, 1.6e-2)])
def test_half_precision_within_bounds(dtype: torch.dtype, tol: float) -> None:
    spec = spec_of(8, 2, 64, 16, dtype=dtype)
    batch = make_batch(spec, [(1, 40), (10, 33)], DEVICE, seed=7)
    assert rel_error(run_backend(spec, batch, splits=2), reference(spec, batch)) < tol


def test_check_reasons() -> None:
    ok = spec_of(8, 2, 128, 16, dtype=torch.bfloat16)
    assert TritonAttentionBackend.check(PLATFORM, ok) is None  # TRITON_INTERPRET=1 on CPU, or a CUDA device
    assert "head sizes" in TritonAttentionBackend.check(PLATFORM, spec_of(8, 2, 512, 16))
    assert "float16, bfloat16 and float32" in TritonAttentionBackend.check(
        PLATFORM, spec_of(8, 2, 64, 16, dtype=torch.float64)
    )
    assert TritonAttentionBackend.supports_graphs and TritonAttentionBackend.priority == 50


def test_check_needs_gpu_or_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert TritonAttentionBackend.check(CpuPlatform(), None) == "triton needs a GPU or TRITON_INTERPRET=1"


def test_split_plan_fills_the_gpu_only_when_needed() -> None:
    from pagoda_attention_triton.plan import choose_num_splits

    assert choose_num_splits(1, 8, 32768, 132) == 32  # one long request: many splits
    assert choose_num_splits(4, 8, 32768, 132) == 8
    assert choose_num_splits(64, 8, 32768, 132) == 1  # 512 programs fill 132 multiprocessors
    assert choose_num_splits(1, 8, 512, 132) == 1  # short contexts: not worth a reduce
    assert choose_num_splits(0, 8, 4096, 132) == 1
