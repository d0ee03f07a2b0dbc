"""Symmetric INT8 quantization in plain torch: scales, quantize, dequantize (any device).

As for FP8 (:mod:`pagoda_quant_fp8.fp8_math`), a scale is the dequantization multiplier,
``x ~= q * scale``, float32, chosen so the largest magnitude maps to ``INT8_MAX`` (127); values
round to the nearest integer, ties to even (``torch.round``), and saturate to [-128, 127]
(compressed-tensors' int8 range). Symmetric: no zero points.
"""

from __future__ import annotations

import torch

from pagoda_quant_fp8.fp8_math import MIN_SCALE

INT8_MAX = 127.0
INT8_MIN = -128.0


def to_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``x / scale`` rounded to the nearest integer (ties to even), saturated to int8 (``scale`` broadcasts)."""
    return torch.round(x.float() / scale).clamp_(INT8_MIN, INT8_MAX).to(torch.int8)


def scale_of(amax: torch.Tensor) -> torch.Tensor:
    """The float32 scale that maps ``amax`` to 127."""
    return (amax.float() / INT8_MAX).clamp_(min=MIN_SCALE)


def quantize_per_tensor(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [...] -> (int8 [...], scale [] float32)."""
    scale = scale_of(x.abs().amax())
    return to_int8(x, scale), scale


def quantize_per_row(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [rows, cols] -> (int8 [rows, cols], scale [rows, 1] float32): per token (activations) or per
    output channel (weights)."""
    scale = scale_of(x.abs().amax(dim=-1, keepdim=True))
    return to_int8(x, scale), scale


def quantize_with_scale(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Quantize with a given (static) scale; values beyond ``127 * scale`` saturate."""
    return to_int8(x, scale)
