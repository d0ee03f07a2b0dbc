"""AutoAWQ's GEMM packing of 4-bit values into int32, and its inverse.

Eight 4-bit values of consecutive output columns share one int32, but not in column order:
nibble ``i`` (bits ``4i .. 4i+3``) holds column ``AWQ_ORDER[i]`` of its group of eight, so
column ``j`` sits in nibble ``NIBBLE_OF_COLUMN[j]``. ``qweight`` ([in, out/8]) and ``qzeros``
([in/group, out/8]) are packed this way along the output axis; ``scales`` ([in/group, out]) are not.
"""

from __future__ import annotations

import torch

PACK = 8  # 4-bit values per int32
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i -> column of the group of eight
NIBBLE_OF_COLUMN = tuple(AWQ_ORDER.index(j) for j in range(PACK))  # (0, 4, 1, 5, 2, 6, 3, 7)


def column_shifts(device: torch.device | str | None = None) -> torch.Tensor:
    """Bit offset of column ``j`` (of each group of eight) inside its int32: ``[8]`` int32."""
    return torch.tensor([4 * n for n in NIBBLE_OF_COLUMN], dtype=torch.int32, device=device)


def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`unpack_int4`: ``[rows, cols]`` ints in 0..15 -> ``[rows, cols/8]`` int32 in
    AutoAWQ's nibble order (for other formats converted to this layout, e.g. pagoda-quant-gptq's)."""
    rows, cols = values.shape
    grouped = values.to(torch.int32).reshape(rows, cols // PACK, PACK)  # [rows, cols/8, 8]
    return (grouped << column_shifts(values.device)).sum(-1, dtype=torch.int32)  # disjoint bits: the sum is an OR


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """``[rows, cols/8]`` int32 -> ``[rows, cols]`` uint8 values in 0..15, columns in order."""
    shifts = column_shifts(packed.device)
    values = (packed.to(torch.int32)[:, :, None] >> shifts) & 0xF  # [rows, cols/8, 8]
    return values.reshape(packed.shape[0], -1).to(torch.uint8)


def dequantize(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int,
               dtype: torch.dtype | None = None) -> torch.Tensor:
    """``W[k, n] = (q[k, n] - z[k // g, n]) * s[k // g, n]``: ``[in, out]`` in ``dtype`` (default: the
    scales' dtype), computed in fp32 (fp64 for fp64) and rounded once, as the kernels do."""
    dtype = dtype or scales.dtype
    work = torch.float64 if dtype == torch.float64 else torch.float32
    q = unpack_int4(qweight).to(work)  # [in, out]
    z = unpack_int4(qzeros).to(work).repeat_interleave(group_size, dim=0)  # [in, out]
    s = scales.to(work).repeat_interleave(group_size, dim=0)  # [in, out]
    return ((q - z) * s).to(dtype)
