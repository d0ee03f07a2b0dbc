"""Grouped int4/int8 weights rewritten as the 4-bit groups pagoda-quant-awq's kernels compute.

``W = (q - z) * s`` with ``q, z`` of 4 bits and one ``(z, s)`` per ``E`` rows, rows in the order of
the input gather (:mod:`pagoda_quant_gptq.regroup`). Two formats' values do not fit that as they are:

- **8-bit weights** split into two 4-bit halves: ``q = 16 qh + ql`` and ``z = 16 zh + zl`` give
  ``(q - z) s = (qh - zh) (16 s) + (ql - zl) s``. The high nibbles form rows ``0 .. K'-1`` (scale
  ``16 s``, exact in every float format), the low nibbles rows ``K' .. 2K'-1`` (scale ``s``), and the
  input is read twice. The GEMM streams the same bytes as an int8 kernel would, through the same
  tensor-core kernel; the dequantizing paths (many tokens, CPUs) add the halves back into one ``W``.
- **A zero point of 16** (GPTQ v1 stores ``z - 1`` in 4 bits: a stored 15 means 16; 8 bits: 256)
  does not fit a nibble: it is stored as 15, and the missing ``-s`` per row is applied as
  ``out -= (sum of the run's inputs) @ excess``, ``excess`` holding ``s`` where the zero was 16.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda_quant_gptq.grouped import GroupedWeights
from pagoda_quant_gptq.regroup import RowPlan, plan_rows

NIBBLE = 16


@dataclass
class Int4Form:
    """One layer's weights ready for the 4-bit kernels."""

    q: torch.Tensor  # [halves * K', N] uint8 0..15: rows of the high halves first (8-bit weights)
    zeros: torch.Tensor  # [halves * K' / E, N] uint8 0..15
    scales: torch.Tensor  # [halves * K' / E, N] float32
    plan: RowPlan  # the input gather and E
    halves: int  # 1 (4-bit weights) or 2 (8-bit)
    excess: torch.Tensor | None  # [K' / E, N] float32, or None: every zero point fits 4 bits

    @property
    def group(self) -> int:
        return self.plan.group


def to_int4(weights: GroupedWeights) -> Int4Form:
    """Reorder, pad and (8-bit) split a layer's weights for the kernels."""
    plan = plan_rows(weights.gid, weights.zeros.shape[0])
    q = weights.q.to(torch.uint8)
    if not plan.identity:  # a pad row reads the zero column; its weight is irrelevant (0 here)
        q = torch.cat([q, q.new_zeros(1, q.shape[1])])[plan.order]
    zeros = weights.zeros.to(torch.int16)[plan.row_groups]  # [K'/E, N]
    scales = weights.scales.float()[plan.row_groups]
    halves = 1
    if weights.bits == 8:
        q = torch.cat([q >> 4, q & 0xF])
        zeros = torch.cat([zeros >> 4, zeros & 0xF])
        scales = torch.cat([scales * NIBBLE, scales])
        halves = 2
    overflow = zeros >= NIBBLE
    excess = None
    if bool(overflow.any()):
        excess = torch.where(overflow, scales * (zeros - (NIBBLE - 1)), 0.0)
        excess = excess.reshape(halves, -1, excess.shape[1]).sum(0)  # both halves read the same inputs
        zeros = zeros.clamp(max=NIBBLE - 1)
    return Int4Form(q, zeros.to(torch.uint8), scales, plan, halves, excess)


def dequantize_form(form: Int4Form, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """W ``[K', N]`` in the gathered row order (excess included), computed in float64: for tests."""
    e = form.group
    w = (form.q.double() - form.zeros.double().repeat_interleave(e, 0)) * form.scales.double().repeat_interleave(e, 0)
    w = w.reshape(form.halves, -1, w.shape[1]).sum(0)
    if form.excess is not None:
        w = w - form.excess.double().repeat_interleave(e, 0)
    return w.to(dtype)
