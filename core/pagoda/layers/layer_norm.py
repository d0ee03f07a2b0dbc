"""LayerNorm with a bias (BERT-family encoders), computed in float32."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.layers.linear import copy_checked


class LayerNorm(nn.Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis; optionally of ``x + residual``."""

    def __init__(self, hidden_size: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(hidden_size, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: [num_tokens, hidden] -> the same shape and dtype."""
        if residual is not None:
            x = x + residual
        out = F.layer_norm(x.float(), self.weight.shape, self.weight.float(), self.bias.float(), self.eps)
        return out.to(x.dtype)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        copy_checked(getattr(self, param_name).data, tensor)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
