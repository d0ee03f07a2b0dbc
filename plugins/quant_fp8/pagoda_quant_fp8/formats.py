"""The two 8-bit formats of the W8A8 methods: ``fp8`` (e4m3) and ``int8`` (symmetric), as the methods use them.

A :class:`QuantFormat` names the element type and its torch quantizers (per row, per tensor, with a given
scale); :mod:`pagoda_quant_fp8.kernels` quantizes activations through it and the methods their weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from pagoda_quant_fp8 import fp8_math, int8_math

Quantizer = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # x -> (q, scale)


@dataclass(frozen=True)
class QuantFormat:
    """An 8-bit format: its element type, largest magnitude and torch quantizers (scale = amax / qmax)."""

    name: str  # "fp8" or "int8": the method's name
    dtype: torch.dtype
    qmax: float
    per_row: Quantizer  # [rows, cols] -> (q, scale [rows, 1])
    per_tensor: Quantizer  # [...] -> (q, scale [])
    with_scale: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x, static scale) -> q

    @property
    def is_int(self) -> bool:
        return not self.dtype.is_floating_point


FP8 = QuantFormat("fp8", fp8_math.FP8_DTYPE, fp8_math.FP8_MAX, fp8_math.quantize_per_row,
                  fp8_math.quantize_per_tensor, fp8_math.quantize_with_scale)
INT8 = QuantFormat("int8", torch.int8, int8_math.INT8_MAX, int8_math.quantize_per_row,
                   int8_math.quantize_per_tensor, int8_math.quantize_with_scale)
