"""Gated activations through ``CustomOps``."""

from __future__ import annotations

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.layers.ops import CustomOps

SUPPORTED_ACTIVATIONS = ("silu",)


class SiluAndMul(nn.Module):
    """[num_tokens, 2 * d] -> silu(gate) * up: [num_tokens, d]."""

    def __init__(self, ops: CustomOps) -> None:
        super().__init__()
        self.ops = ops

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.silu_and_mul(x)


def gated_activation(hidden_act: str, ops: CustomOps) -> nn.Module:
    """The gated activation named by the HF config's ``hidden_act``."""
    if hidden_act != "silu":
        raise ModelLoadError(
            f"hidden_act '{hidden_act}' in the model config is not supported "
            f"(supported: {', '.join(SUPPORTED_ACTIVATIONS)})."
        )
    return SiluAndMul(ops)
