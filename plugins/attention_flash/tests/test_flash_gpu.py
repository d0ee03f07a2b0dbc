"""The flash kernels on a GPU against a float64 reference (marked ``gpu``: skipped without CUDA).

Every case poisons the output with NaN first (a row the kernels forget fails the finiteness
check), prints ``FLASHERR <case> rel=... max_abs=...`` (``pytest -s`` shows them; the device
script collects them), and compares the relative L2 error with a bound per dtype.
"""

from __future__ import annotations

import pytest
import torch

from paged_batches import PagedBatch, make_batch, reference, rel_error
from pagoda.interfaces.attention import AttentionSpec

pytestmark = pytest.mark.gpu

TOLS = {torch.bfloat16: 1e-2, torch.float16: 2e-3}  # relative L2 error, as for the triton backend
# decodes first (a 1-token context among them), then a prompt, chunks after cached prefixes
# (aligned and not to the 64-row tiles and 16-token blocks), and a 1-token chunk
MIXED = [(1, 1500), (1, 17), (1, 700), (1, 1), (333, 333), (200, 1100), (77, 900), (64, 64), (16, 40), (1, 130)]


def _platform():
    from pagoda_platform_cuda.platform import CudaPlatform

    return CudaPlatform()


def run_flash(spec: AttentionSpec, batch: PagedBatch, splits: int | None = None, poison: float = float("nan")):
    from pagoda_attention_flash.backend import FlashAttentionBackend

    backend = FlashAttentionBackend(spec, _platform())
    backend.force_num_splits = splits
    metadata = backend.prepare(batch.metadata)
    out = torch.full(batch.query.shape, poison, dtype=spec.dtype, device="cuda")
    backend.forward_into(out, batch.query, batch.key, batch.value, batch.kv_cache, metadata)
    torch.cuda.synchronize()
    return out


def check_case(name: str, spec: AttentionSpec, batch: PagedBatch, out: torch.Tensor) -> None:
    ref = reference(spec, batch, "cuda")
    finite = bool(torch.isfinite(out).all())
    max_abs = float((out.double().cpu() - ref).abs().max()) if finite else float("nan")
    rel = rel_error(out, ref) if finite else float("nan")
    print(f"FLASHERR {name} rel={rel:.2e} max_abs={max_abs:.2e} tol={TOLS[spec.dtype]:.0e}")
    assert finite, f"{name}: non-finite output (a row was not written, or NaN/inf inside)"
    assert rel < TOLS[spec.dtype], f"{name}: relative error {rel:.2e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("head", [64, 128, 256])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_mixed_batch_matches_reference(dtype, head, group) -> None:
    spec = AttentionSpec(2 * group, 2, head, head**-0.5, 16, dtype)
    batch = make_batch(spec, MIXED, "cuda", seed=head + group)
    check_case(f"mixed-{str(dtype)[6:]}-d{head}-gqa{group}", spec, batch, run_flash(spec, batch))


@pytest.mark.parametrize("group", [1, 4, 8])
def test_repeated_runs_are_bit_identical(group) -> None:
    spec = AttentionSpec(4 * group, 4, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, MIXED, "cuda", seed=5)
    first = run_flash(spec, batch, splits=4, poison=float("nan"))
    second = run_flash(spec, batch, splits=4, poison=0.0)
    assert torch.equal(first, second)


@pytest.mark.parametrize("splits", [None, 1, 4, 16, 64])
def test_split_kv_decode_long_context(splits) -> None:
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 16000), (1, 9000), (1, 1), (1, 4097), (1, 100)], "cuda", seed=11)
    check_case(f"split-decode-{splits}", spec, batch, run_flash(spec, batch, splits=splits))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_long_prefill_over_a_cached_prefix(dtype) -> None:
    spec = AttentionSpec(32, 4, 128, 128**-0.5, 16, dtype)
    batch = make_batch(spec, [(1, 3000), (1000, 5000), (2048, 2048), (129, 4100)], "cuda", seed=13)
    check_case(f"long-prefill-{str(dtype)[6:]}", spec, batch, run_flash(spec, batch))


@pytest.mark.parametrize("block,window", [(32, None), (16, 256), (32, 100)])
def test_block_sizes_and_sliding_window(block, window) -> None:
    spec = AttentionSpec(16, 4, 64, 64**-0.5, block, torch.float16, window)
    batch = make_batch(spec, [(1, 900), (1, 50), (300, 700), (90, 90), (65, 400)], "cuda", seed=block)
    check_case(f"block{block}-window{window}", spec, batch, run_flash(spec, batch, splits=None))
    check_case(f"block{block}-window{window}-split8", spec, batch, run_flash(spec, batch, splits=8))


def test_cache_holds_this_steps_keys_after_forward() -> None:
    spec = AttentionSpec(8, 2, 64, 0.125, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 30), (12, 20)], "cuda", seed=3)
    run_flash(spec, batch)
    slots = batch.metadata.slot_mapping
    assert torch.equal(batch.kv_cache[0].view(-1, 2, 64)[slots], batch.key)
    assert torch.equal(batch.kv_cache[1].view(-1, 2, 64)[slots], batch.value)


def test_decode_replays_in_a_cuda_graph() -> None:
    """Capture one decode step; replay after shrinking lengths in place: equal to eager."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    batch = make_batch(spec, [(1, 3000), (1, 100), (1, 5000), (1, 64)], "cuda", seed=12)
    backend = FlashAttentionBackend(spec, _platform())
    backend.force_num_splits = 8
    metadata = backend.prepare(batch.metadata)
    args = (batch.query, batch.key, batch.value, batch.kv_cache, metadata)
    backend.forward(*args)  # warm up (first-use work) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # captures on its own side stream
        out = backend.forward(*args)
    metadata.seq_lens.sub_(torch.tensor([1000, 50, 7, 1], dtype=torch.int32, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    expected = backend.forward(*args)
    assert torch.equal(out, expected)


def test_check_passes_on_this_gpu() -> None:
    from pagoda_attention_flash.backend import FlashAttentionBackend

    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("flash needs sm80+")
    spec = AttentionSpec(32, 8, 128, 128**-0.5, 16, torch.bfloat16)
    assert FlashAttentionBackend.check(_platform(), spec) is None
