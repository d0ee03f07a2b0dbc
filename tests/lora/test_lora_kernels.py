"""The LoRA shrink/expand kernels (Triton under the interpreter, and the torch reference) against a float64
reference: ranks 8/16/64, decode rows (BGMV), prefill segments (SGMV) and both mixed, rows without an
adapter, fused slices of different sizes (q/k/v), and the graph plan (every row a decode row)."""

from __future__ import annotations

import random

import pytest
import torch

from pagoda.lora.ops import add_lora_torch
from pagoda.lora.plan import (DECODE_BLOCK, build_plan, decode_blocks, graph_buffer_size, graph_plan,
                              max_decode_blocks, write_graph_plan)
from pagoda.testing import interpreted_kernels

LAYOUTS = {  # tokens per request (decodes first), and its slot (-1: no adapter)
    "decodes": ([1, 1, 1, 1, 1], [0, -1, 2, 0, 3]),
    "decode blocks": ([1] * 37, [3, 0, -1, 0, 0, 2, 1, -1, 3, 3, 0, 1, 2, 0, 0, 0, 2, -1, 1, 1, 3, 0, 2, 2, 0, 1, 1, -1,
                                 3, 0, 0, 2, 1, 0, -1, 3, 1]),  # three blocks of 16 rows, slots mixed in each
    "prefills": ([5, 17, 3, 40], [1, -1, 3, 1]),
    "mixed": ([1, 1, 1, 9, 20, 4, 1], [2, -1, 0, -1, 1, 1, 3]),
    "one adapter": ([1, 33], [2, 2]),
}
SLICES = {"qkv": [64, 32, 32], "one": [80]}


@pytest.fixture(scope="module")
def triton_kernels():
    yield from interpreted_kernels("pagoda.lora.triton_kernels")


def _case(rank: int, slices: list[int], dtype: torch.dtype, num_rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed + rank)
    num_slots, k = 4, 48  # 48: not a multiple of the kernels' K block
    n = sum(slices)
    x = torch.randn(num_rows, k, generator=g).to(dtype)
    a = (torch.randn(num_slots, len(slices), rank, k, generator=g) / k**0.5).to(dtype)
    b = (torch.randn(num_slots, n, rank, generator=g) / rank**0.5).to(dtype)
    y = torch.randn(num_rows, n, generator=g).to(dtype)
    offsets = [sum(slices[:i]) for i in range(len(slices))]
    return x, a, b, y, list(zip(offsets, slices))


def _reference(x, a, b, y, host_slices, row_slots: list[int]) -> torch.Tensor:
    """float64: y + per row, per slice, x A^T B^T of the row's slot."""
    out = y.double().clone()
    for row, slot in enumerate(row_slots):
        if slot < 0:
            continue
        for s, (offset, size) in enumerate(host_slices):
            shrunk = a[slot, s].double() @ x[row].double()
            out[row, offset : offset + size] += b[slot, offset : offset + size].double() @ shrunk
    return out


def _row_slots(counts: list[int], slots: list[int]) -> list[int]:
    return [slot for n, slot in zip(counts, slots) for _ in range(n)]


def _run(kernel: str, y, x, a, b, host_slices, plan):
    """``kernel``: "torch" (the reference path) or "triton" (the kernels; decode rows' shrink split over K, then
    the expand)."""
    if kernel == "torch":
        return add_lora_torch(y, x, a, b, None, host_slices, plan)
    from pagoda.lora.triton_kernels import add_lora_triton, tiles

    t = tiles(plan.max_segment_len)
    assert x.shape[1] > t.split_k, "the decode rows' shrink runs over several K splits"
    slices = torch.tensor(host_slices, dtype=torch.int32)
    return add_lora_triton(y, x, a, b, slices, max(size for _, size in host_slices), plan, t)


@pytest.mark.parametrize("kernel", ["triton", "torch"])
@pytest.mark.parametrize("rank", [8, 16, 64])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("slices", list(SLICES))
def test_kernels_match_float64(request, kernel, rank, layout, slices):
    if kernel == "triton":
        request.getfixturevalue("triton_kernels")
    counts, slots = LAYOUTS[layout]
    x, a, b, y, host_slices = _case(rank, SLICES[slices], torch.float32, sum(counts))
    expected = _reference(x, a, b, y, host_slices, _row_slots(counts, slots))
    plan = build_plan(slots, counts, torch.device("cpu"), groups=kernel == "torch")
    got = _run(kernel, y.clone(), x, a, b, host_slices, plan)
    assert torch.allclose(got.double(), expected, atol=2e-5, rtol=1e-5), (got.double() - expected).abs().max()


@pytest.mark.parametrize("kernel", ["triton", "torch"])
def test_rows_without_adapter_are_untouched(request, kernel):
    if kernel == "triton":
        request.getfixturevalue("triton_kernels")
    counts, slots = LAYOUTS["mixed"]
    x, a, b, y, host_slices = _case(16, SLICES["qkv"], torch.float32, sum(counts))
    got = _run(kernel, y.clone(), x, a, b, host_slices, build_plan(slots, counts, torch.device("cpu"), kernel == "torch"))
    untouched = [row for row, slot in enumerate(_row_slots(counts, slots)) if slot < 0]
    assert torch.equal(got[untouched], y[untouched])


def test_no_adapter_in_the_step_has_no_plan():
    assert build_plan([-1, -1], [1, 7], torch.device("cpu"), groups=True) is None


@pytest.mark.parametrize("kernel", ["triton", "torch"])
@pytest.mark.parametrize("row_slots", [[3, -1, 0, 0, 2, -1, -1, -1], [1, 0] * 20 + [-1] * 8])
def test_graph_plan_reads_every_row_as_a_decode_row(request, kernel, row_slots):
    """A captured decode step: the plan has no row count; the rows of the input are all decode rows, the
    slots and decode blocks read from the static buffer, written for a smaller step than its largest."""
    if kernel == "triton":
        request.getfixturevalue("triton_kernels")
    x, a, b, y, host_slices = _case(16, SLICES["qkv"], torch.float32, len(row_slots))
    max_rows, num_slots = 64, a.shape[0]
    static = torch.full((graph_buffer_size(max_rows, num_slots),), 7, dtype=torch.int32)  # stale entries
    write_graph_plan(static.numpy(), row_slots, max_rows, num_slots)
    got = _run(kernel, y.clone(), x, a, b, host_slices, graph_plan(static, max_rows, num_slots))
    expected = _reference(x, a, b, y, host_slices, row_slots)
    assert torch.allclose(got.double(), expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(20))
def test_decode_blocks_hold_each_adapter_row_once_within_the_bound(seed):
    rng = random.Random(seed)
    num_slots = rng.choice([1, 3, 8])
    slots = [rng.randrange(-1, num_slots) for _ in range(rng.randrange(1, 80))]
    block_slots, block_rows = decode_blocks(slots)
    assert len(block_slots) <= max_decode_blocks(len(slots), num_slots)
    assert len(block_rows) == DECODE_BLOCK * len(block_slots)
    rows = [row for row in block_rows if row >= 0]
    assert sorted(rows) == [row for row, slot in enumerate(slots) if slot >= 0]
    for i, slot in enumerate(block_slots):
        assert all(slots[row] == slot for row in block_rows[i * DECODE_BLOCK : (i + 1) * DECODE_BLOCK] if row >= 0)


@pytest.mark.parametrize("kernel", ["triton", "triton_split"])
def test_triton_bfloat16_within_rounding(triton_kernels, kernel):
    counts, slots = LAYOUTS["mixed"]
    x, a, b, y, host_slices = _case(16, SLICES["qkv"], torch.bfloat16, sum(counts))
    expected = _reference(x, a, b, y, host_slices, _row_slots(counts, slots))
    got = _run(kernel, y.clone(), x, a, b, host_slices, build_plan(slots, counts, torch.device("cpu"), False))
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), expected, atol=0.05, rtol=0.02), (got.double() - expected).abs().max()
