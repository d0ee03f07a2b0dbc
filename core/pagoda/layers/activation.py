"""Gated activations through ``CustomOps``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.ops import CustomOps

if TYPE_CHECKING:
    from pagoda.interfaces.quantization import InputQuantizer, QuantizedInput

SUPPORTED_ACTIVATIONS = ("silu", "gelu_pytorch_tanh")


class SiluAndMul(nn.Module):
    """[num_tokens, 2 * d] -> silu(gate) * up: [num_tokens, d]."""

    def __init__(self, ops: CustomOps) -> None:
        super().__init__()
        self.ops = ops

    def forward(self, x: torch.Tensor, quant: "InputQuantizer | None" = None) -> "torch.Tensor | QuantizedInput":
        """With ``quant`` (the consuming linear's ``input_quantizer``) the result comes out quantized."""
        return self.ops.silu_and_mul(x) if quant is None else quant.silu_and_mul(self.ops, x)


class GeluTanhAndMul(nn.Module):
    """[num_tokens, 2 * d] -> gelu_tanh(gate) * up: [num_tokens, d] (Gemma's ``gelu_pytorch_tanh``)."""

    def forward(self, x: torch.Tensor, quant: "InputQuantizer | None" = None) -> "torch.Tensor | QuantizedInput":
        gate, up = x.chunk(2, dim=-1)
        out = F.gelu(gate, approximate="tanh") * up
        return out if quant is None else quant.quantize(out)


def gated_activation(hidden_act: str, ops: CustomOps) -> nn.Module:
    """The gated activation named by the HF config's ``hidden_act`` (or ``hidden_activation``)."""
    if hidden_act == "gelu_pytorch_tanh":
        return GeluTanhAndMul()
    if hidden_act != "silu":
        raise ModelLoadError(
            f"hidden_act '{hidden_act}' in the model config is not supported "
            f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})."
        )
    return SiluAndMul(ops)
