"""The whole-row nucleus search of ``top_p.top_p_search`` as one Triton program per row.

A row's fp32 values map to ordered int32 keys (the bits, with the magnitude bits flipped for
negative values), so "value >= v" is "key >= key(v)". The program narrows the key range of the
answer (the largest value v with mass(x >= v) >= top_p) by testing ``PIVOTS`` evenly spaced keys
per pass over the row, each pass dividing the range by ``PIVOTS + 1``: ``PASSES`` passes cover the
2^32 keys. Rows not marked for the search return at once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

PIVOTS = 16
PASSES = 9  # (PIVOTS + 1)^8 > 2^32: eight passes narrow the range to one key; one spare
BLOCK = 1024
KEY_MIN = -(2**31)


@triton.jit
def _ordered_keys(values):
    bits = values.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits).to(tl.int64)


@triton.jit
def _masses(x_row, vocab, lse, floor, pivots, BLOCK: tl.constexpr, PIVOTS: tl.constexpr):
    """[PIVOTS]: for each pivot key, the mass exp(x - lse) of the row's values at or above ``floor``
    whose key is at least the pivot."""
    acc = tl.zeros([PIVOTS], dtype=tl.float32)
    for start in range(0, vocab, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        values = tl.load(x_row + offs, mask=offs < vocab, other=float("-inf"))
        weight = tl.where(values >= floor, tl.exp(values - lse), 0.0)
        above = _ordered_keys(values)[:, None] >= pivots[None, :]
        acc += tl.sum(tl.where(above, weight[:, None], 0.0), axis=0)
    return acc


@triton.jit
def _search_kernel(x_ptr, lse_ptr, floor_ptr, top_p_ptr, search_ptr, out_ptr, vocab, stride_x,
                   BLOCK: tl.constexpr, PIVOTS: tl.constexpr, PASSES: tl.constexpr):
    row = tl.program_id(0)
    if tl.load(search_ptr + row) != 0:
        x_row = x_ptr + row.to(tl.int64) * stride_x
        lse = tl.load(lse_ptr + row)
        floor = tl.load(floor_ptr + row)
        top_p = tl.load(top_p_ptr + row)
        lo = tl.full((), -(2**31), tl.int64)  # mass(key >= lo) is the whole mass: the answer when none passes
        hi = tl.full((), 2**31 - 1, tl.int64)
        j = tl.arange(0, PIVOTS).to(tl.int64)
        for _ in range(PASSES):
            seg = tl.maximum((hi - lo) // (PIVOTS + 1), 1)
            pivots = lo + (j + 1) * seg  # [PIVOTS], rising; those past hi never pass
            passed = (_masses(x_row, vocab, lse, floor, pivots, BLOCK, PIVOTS) >= top_p) & (pivots <= hi)
            new_lo = tl.max(tl.where(passed, pivots, lo), axis=0)
            hi = tl.minimum(hi, tl.min(tl.where(passed | (pivots > hi), 2**31 - 1, pivots - 1), axis=0))
            lo = new_lo
        bits = tl.where(lo < 0, lo ^ 0x7FFFFFFF, lo).to(tl.int32)
        value = bits.to(tl.float32, bitcast=True)
        tl.store(out_ptr + row, tl.where(lo == -(2**31), float("-inf"), value))


def search_thresholds(x: torch.Tensor, lse: torch.Tensor, floor: torch.Tensor, top_p: torch.Tensor,
                      search: torch.Tensor) -> torch.Tensor:
    """[N, 1] float32: the searched threshold of each row marked in ``search`` ([N, 1] bool)."""
    x = x.float().contiguous()
    rows, vocab = x.shape
    out = torch.empty(rows, dtype=torch.float32, device=x.device)
    if rows:
        _search_kernel[(rows,)](
            x, lse.float().contiguous(), floor.float().contiguous(), top_p.float().contiguous(),
            search.to(torch.int8).contiguous(), out, vocab, x.stride(0),
            BLOCK=min(BLOCK, triton.next_power_of_2(vocab)), PIVOTS=PIVOTS, PASSES=PASSES,
        )
    return out[:, None]
