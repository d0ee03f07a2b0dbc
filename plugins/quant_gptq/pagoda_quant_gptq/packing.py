"""Little-endian packing of ``bits``-bit values into int32, as GPTQ and compressed-tensors store them.

Value ``j`` of a word sits at bits ``bits * j .. bits * j + bits - 1`` (no interleaving, unlike AWQ).
GPTQ packs ``qweight`` along the input axis (``[K / pack, N]``: word ``r`` holds rows
``pack * r .. pack * r + pack - 1``) and ``qzeros`` along the output axis; compressed-tensors packs
``weight_packed`` (``[N, K / pack]``) along its last axis and ``weight_zero_point`` along its first.
"""

from __future__ import annotations

import torch


def _shifts(bits: int, device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, bits, dtype=torch.int32, device=device)


def unpack_rows(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """``[R, C]`` int32 -> ``[R * 32 / bits, C]`` uint8: value ``j`` of word ``(r, c)`` is row ``r * pack + j``."""
    values = (packed[:, None, :] >> _shifts(bits, packed.device)[None, :, None]) & ((1 << bits) - 1)  # [R, pack, C]
    return values.reshape(-1, packed.shape[1]).to(torch.uint8)


def unpack_columns(packed: torch.Tensor, bits: int) -> torch.Tensor:
    """``[R, C]`` int32 -> ``[R, C * 32 / bits]`` uint8: value ``j`` of word ``(r, c)`` is column ``c * pack + j``."""
    values = (packed[:, :, None] >> _shifts(bits, packed.device)) & ((1 << bits) - 1)  # [R, C, pack]
    return values.reshape(packed.shape[0], -1).to(torch.uint8)


def pack_columns(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`unpack_columns` (``values`` in ``0 .. 2**bits - 1``)."""
    rows, cols = values.shape
    grouped = values.to(torch.int32).reshape(rows, cols * bits // 32, 32 // bits)
    return (grouped << _shifts(bits, values.device)).sum(-1, dtype=torch.int32)  # disjoint bits: the sum is an OR


def pack_rows(values: torch.Tensor, bits: int) -> torch.Tensor:
    """Inverse of :func:`unpack_rows`."""
    return pack_columns(values.t(), bits).t().contiguous()
