"""``argmax`` of a decode step's few rows in one Triton launch.

The torch split argmax (``argmax.py``) takes four kernels a step (the slices' max, the best slice, a gather,
an add), each a few microseconds of launch and dependency at batch 1. Here the programs of a row each take
one slice (first index of its largest value, or of its first NaN), store it, and count themselves in with an
atomic; the row's last program combines the slices in order and resets the count, so the next launch (or
a CUDA graph's replay) starts from zero. Same index as ``torch.argmax``: NaN beats every number, the first
of equals wins.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.layers.argmax import SPLIT_ROWS as MAX_ROWS  # more rows take torch's argmax

BLOCK = 1024  # values a program reads at a time
MAX_SLICES = 128
NONE = 2**31 - 1  # "no index" (larger than any)
_counts: dict[torch.device, torch.Tensor] = {}  # device -> the rows' counts, zero between launches (kept: graphs
# that recorded a launch hold its address)


@triton.jit
def _argmax_kernel(x_ptr, out_ptr, val_ptr, idx_ptr, count_ptr, vocab, stride_row, width,
                   SLICES: tl.constexpr, BLOCK: tl.constexpr, NONE: tl.constexpr):
    row = tl.program_id(0)
    s = tl.program_id(1)
    lo = s * width
    hi = tl.minimum(lo + width, vocab)
    best = tl.full([], float("-inf"), tl.float32)
    best_i = tl.full([], NONE, tl.int32)
    nan_i = tl.full([], NONE, tl.int32)
    for start in range(lo, hi, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        ok = offs < hi
        v = tl.load(x_ptr + row.to(tl.int64) * stride_row + offs, mask=ok, other=float("-inf")).to(tl.float32)
        nan_i = tl.minimum(nan_i, tl.min(tl.where(ok & (v != v), offs, NONE), 0))
        v = tl.where(v != v, float("-inf"), v)
        m = tl.max(v, 0)
        i = tl.min(tl.where(ok & (v == m), offs, NONE), 0)
        take = (m > best) | ((m == best) & (i < best_i))  # equal: a later chunk's index is larger, but not NONE's
        best = tl.where(take, m, best)
        best_i = tl.where(take, i, best_i)
    slot = row * SLICES + s
    tl.store(val_ptr + slot, tl.where(nan_i < NONE, float("nan"), best))
    tl.store(idx_ptr + slot, tl.where(nan_i < NONE, nan_i, best_i))
    if tl.atomic_add(count_ptr + row, 1, sem="acq_rel") == SLICES - 1:  # the row's last program
        k = row * SLICES + tl.arange(0, SLICES)
        vals = tl.load(val_ptr + k, cache_modifier=".cg")
        idxs = tl.load(idx_ptr + k, cache_modifier=".cg")
        first_nan = tl.min(tl.where(vals != vals, idxs, NONE), 0)  # slices in order: the first NaN
        vals = tl.where(vals != vals, float("-inf"), vals)
        m = tl.max(vals, 0)
        first_max = tl.min(tl.where(vals == m, idxs, NONE), 0)
        tl.store(out_ptr + row, tl.where(first_nan < NONE, first_nan, first_max).to(tl.int64))
        tl.store(count_ptr + row, 0)


def argmax_rows(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` [rows] int64 = ``torch.argmax(x, dim=-1)`` for ``x`` [rows, vocab] (its last dimension contiguous)."""
    rows, vocab = x.shape
    assert rows <= MAX_ROWS, f"{rows} rows: argmax_rows takes at most {MAX_ROWS}"
    slices = min(MAX_SLICES, triton.next_power_of_2(max(1, -(-vocab // (2 * BLOCK)))))
    counts = _counts.get(x.device)
    if counts is None:
        counts = _counts[x.device] = torch.zeros(MAX_ROWS, dtype=torch.int32, device=x.device)
    vals = torch.empty(rows * slices, dtype=torch.float32, device=x.device)
    idxs = torch.empty(rows * slices, dtype=torch.int32, device=x.device)
    _argmax_kernel[(rows, slices)](x, out, vals, idxs, counts, vocab, x.stride(0), -(-vocab // slices),
                                   SLICES=slices, BLOCK=BLOCK, NONE=NONE, num_warps=4)
    return out
