"""The built-in ``none`` quantization method: plain dense weights, ``F.linear``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.interfaces.quantization import QuantizationMethod


class UnquantizedMethod(QuantizationMethod):
    description = "dense weights in the model dtype"

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        layer.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return F.linear(x, layer.weight, bias)
