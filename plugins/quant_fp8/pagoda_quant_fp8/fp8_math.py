"""FP8 (e4m3) quantization in plain torch: scales, quantize, dequantize (any device).

A scale is the dequantization multiplier: ``x ~= q.float() * scale``. Scales are float32 and
chosen so the largest magnitude maps to ``FP8_MAX`` (448 for e4m3fn); values round to
nearest-even on the cast and saturate at +-448 (e4m3fn has no infinities).
"""

from __future__ import annotations

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0
MIN_SCALE = 1e-12  # all-zero rows/tensors get this scale instead of 0 (no division by zero)


def to_fp8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` saturated to +-448 and rounded to e4m3 (``scale`` broadcasts against ``x``)."""
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def scale_of(amax: torch.Tensor) -> torch.Tensor:
    """The float32 scale that maps ``amax`` to ``FP8_MAX``."""
    return (amax.float() / FP8_MAX).clamp_(min=MIN_SCALE)


def quantize_per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [...] -> (fp8 [...], scale [] float32)."""
    scale = scale_of(x.abs().amax())
    return to_fp8(x, scale), scale


def quantize_per_row(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] -> (fp8 [rows, cols], scale [rows, 1] float32): one scale per row.

    Per token for activations ([num_tokens, in_features]), per output channel for weights
    ([out_features, in_features]).
    """
    scale = scale_of(x.abs().amax(dim=-1, keepdim=True))
    return to_fp8(x, scale), scale


def quantize_with_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Quantize with a given (static) scale; values beyond ``448 * scale`` saturate."""
    return to_fp8(x, scale)


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``q.float() * scale`` in ``dtype`` (``scale`` broadcasts: [], [rows, 1] or [1, cols])."""
    return (q.float() * scale.float()).to(dtype)


def dequantize_blocks(q: torch.Tensor, block_scale: torch.Tensor, block: tuple[int, int]) -> torch.Tensor:
    """Block-scaled weights -> float32. ``q`` [N, K] fp8; ``block_scale`` [ceil(N/bn), ceil(K/bk)]."""
    bn, bk = block
    n, k = q.shape
    rows = block_scale.float().repeat_interleave(bn, dim=0)[:n]  # [N, ceil(K/bk)]
    full = rows.repeat_interleave(bk, dim=1)[:, :k]  # [N, K]
    return q.float() * full


def quantize_blocks(w: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Float weights [N, K] -> (fp8 [N, K], scale [ceil(N/bn), ceil(K/bk)]): the checkpoint layout
    of block-wise FP8 (used by tests to write such checkpoints)."""
    bn, bk = block
    n, k = w.shape
    pad = torch.zeros(-(-n // bn) * bn, -(-k // bk) * bk, dtype=torch.float32, device=w.device)
    pad[:n, :k] = w.float()
    tiles = pad.view(pad.shape[0] // bn, bn, pad.shape[1] // bk, bk)  # [nb, bn, kb, bk]
    scale = scale_of(tiles.abs().amax(dim=(1, 3)))  # [nb, kb]
    full = scale.repeat_interleave(bn, 0).repeat_interleave(bk, 1)[:n, :k]
    return to_fp8(w, full), scale
