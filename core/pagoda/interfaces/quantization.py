"""QuantizationMethod: how a linear layer stores its weights and computes ``x @ W.T``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import nn

from pagoda.interfaces.base import Capability
from pagoda.interfaces.platform import Platform


class QuantizationMethod(Capability, ABC):
    """Owns the parameters of every linear layer of a model.

    ``create_weights`` registers parameters on the layer (their names are the checkpoint's, e.g.
    ``weight``, ``weight_scale``, ``qweight``); the loader copies checkpoint tensors into them;
    ``process_weights_after_loading`` may repack them; ``apply`` computes the layer's output.
    """

    def __init__(self, quant_config: dict[str, Any] | None = None) -> None:
        self.quant_config = quant_config or {}

    @classmethod
    def check(cls, platform: Platform) -> str | None:
        """``None`` if this method runs on ``platform``, else the reason."""
        return None

    @abstractmethod
    def create_weights(
        self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype
    ) -> None:
        """Register the layer's parameters (before loading; values are overwritten)."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Convert loaded parameters to the layout ``apply`` uses."""

    @abstractmethod
    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x``: ``[num_tokens, in_features]`` -> ``[num_tokens, out_features]``."""
