"""The built-in ``none`` quantization method: plain dense weights, ``F.linear`` (or the platform's
``CustomOps.linear``, e.g. a GEMV kernel for decode steps of a few tokens, once bound), in the layout the
platform's ops pack them into after loading (``CustomOps.pack_linear_weight``)."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.interfaces.quantization import QuantizationMethod
from pagoda.interfaces.ops import CustomOps


class UnquantizedMethod(QuantizationMethod):
    description = "dense weights in the model dtype"
    ops: CustomOps = CustomOps()  # F.linear until the engine binds the platform's ops

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        layer.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)

    def bind_ops(self, ops: CustomOps) -> None:
        self.ops = ops

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        packed = self.ops.pack_linear_weight(layer.weight.data)  # e.g. oneDNN's blocked layout on CPUs
        if packed is not None:
            layer.weight = nn.Parameter(packed, requires_grad=False)

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return self.ops.linear(x, layer.weight, bias)
