"""The attention layer: reshapes q/k/v into heads and hands them to the attention backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.errors import IncompatibleChoiceError

if TYPE_CHECKING:
    from pagoda.interfaces.attention import AttentionBackend
    from pagoda.interfaces.model import ForwardContext


class Attention(nn.Module):
    """One layer's attention over the paged KV cache ``fwd.kv_caches[layer_idx]``."""

    def __init__(
        self, layer_idx: int, num_heads: int, num_kv_heads: int, head_dim: int, backend: "AttentionBackend"
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.backend = backend
        _check_spec(backend, num_heads, num_kv_heads, head_dim)

    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads * head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
        v: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
        fwd: "ForwardContext",
    ) -> torch.Tensor:  # [num_tokens, num_heads * head_dim]
        """Write k/v into the layer's cache and attend."""
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        out = self.backend.forward(q, k, v, fwd.kv_caches[self.layer_idx], fwd.metadata)
        return out.reshape(-1, self.num_heads * self.head_dim)

    def extra_repr(self) -> str:
        return f"layer={self.layer_idx}, heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}"


def _check_spec(backend: "AttentionBackend", num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    spec = backend.spec
    if (spec.num_heads, spec.num_kv_heads, spec.head_size) != (num_heads, num_kv_heads, head_dim):
        raise IncompatibleChoiceError(
            f"The attention backend was built for {spec.num_heads} heads / {spec.num_kv_heads} kv heads / "
            f"head size {spec.head_size}, but the model has {num_heads} / {num_kv_heads} / {head_dim}; "
            "create the backend from pagoda.models.spec.attention_spec(hf_config, ...)."
        )
