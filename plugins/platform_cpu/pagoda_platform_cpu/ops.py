"""``NativeCpuOps``: the built-in CPU ops (oneDNN products, in-place KV writes) with RMSNorm, its residual add,
SiLU-and-multiply and the rotary embedding as one compiled pass each (``fused_ops.cpp``).

torch runs RMSNorm as five operations over the whole tensor and SiLU-and-multiply as two, each with its own pass
and temporary; the kernels finish a row while it is in cache. float32 and bfloat16 tensors whose rows have the
features contiguous take the kernels; anything else (float16, interleaved rotary, multi-axis positions) the
built-in ops.
"""

from __future__ import annotations

from types import ModuleType

import torch

from pagoda.platforms.cpu_ops import CpuOps

KERNEL_DTYPES = (torch.float32, torch.bfloat16)


def rows_of(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` as [rows, features] for the kernels (a view where one exists), or None where they do not take it."""
    if x.dtype not in KERNEL_DTYPES or x.dim() < 1 or x.stride(-1) != 1:
        return None
    if x.dim() == 2:  # the common case, without reshape's cost (a decode step's call takes a few microseconds)
        return x
    rows = x.reshape(-1, x.shape[-1])
    return rows if rows.stride(-1) == 1 else None


def new_rows(rows: torch.Tensor) -> torch.Tensor:
    """An empty contiguous tensor of ``rows``'s shape and dtype (``empty_like`` takes a third of ``empty``'s time)."""
    return torch.empty_like(rows, memory_format=torch.contiguous_format)


def shaped(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The kernel's rows ``out`` in ``x``'s leading dimensions (a view costs microseconds: none for 2-D ``x``)."""
    return out if x.dim() == 2 else out.view(*x.shape[:-1], out.shape[-1])


class NativeCpuOps(CpuOps):
    name = "cpu-native"

    def __init__(self, kernels: ModuleType) -> None:
        self.kernels = kernels

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rows = rows_of(x)
        if rows is None or weight.dtype != x.dtype or not weight.is_contiguous():
            return super().rms_norm(x, weight, eps)
        out = new_rows(rows)
        self.kernels.rms_norm(out, rows, None, None, weight, eps)
        return shaped(out, x)

    def fused_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        rows, residual_rows = rows_of(x), rows_of(residual)
        if (rows is None or residual_rows is None or residual.shape != x.shape or residual.dtype != x.dtype
                or weight.dtype != x.dtype or not weight.is_contiguous()):
            return super().fused_add_rms_norm(x, residual, weight, eps)
        out, total = new_rows(rows), new_rows(rows)
        self.kernels.rms_norm(out, rows, residual_rows, total, weight, eps)
        return shaped(out, x), shaped(total, x)

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        rows = rows_of(x)
        if rows is None or x.shape[-1] % 2:
            return super().silu_and_mul(x)
        out = rows.new_empty(rows.shape[0], rows.shape[1] // 2)
        self.kernels.silu_and_mul(out, rows)
        return shaped(out, x)

    def rotary_embedding(self, positions, query, key, head_size, cos_sin_cache, is_neox) -> None:
        if not (is_neox and positions.dim() == 1 and query.dim() == 2 and key.dim() == 2 and query.dtype == key.dtype
                and query.dtype in KERNEL_DTYPES and query.stride(1) == 1 and key.stride(1) == 1
                and cos_sin_cache.dtype in (torch.float32, query.dtype) and cos_sin_cache.stride(-1) == 1):
            return super().rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        self.kernels.rotary_embedding(positions.long(), query, key, head_size, cos_sin_cache)
