"""The 'example' attention backend.

It starts as Pagoda's torch reference (``forward`` calls it): replace ``forward`` with your
kernel, and ``check`` with the real limits of that kernel.
"""

from __future__ import annotations

import torch

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces import AttentionMetadata, AttentionSpec, Platform


class ExampleBackend(TorchAttentionBackend):
    """Attention over the paged KV cache (contract: ``pagoda.interfaces.AttentionBackend``)."""

    description = "the 'example' attention backend (template: the torch reference)"
    # `auto` picks the usable backend with the highest priority: torch has 0, triton 50, flash 60. Below
    # them, installing this plugin changes no default run; raise it once check() refuses what forward cannot run.
    priority = -1

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        """``None`` if usable on ``platform`` for ``spec``, else the reason users will read."""
        if spec is not None and spec.head_size % 8:
            return f"head size {spec.head_size} is not a multiple of 8"
        return None

    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_size]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_size]
        """Write this step's keys/values at ``metadata.slot_mapping``, then attend causally."""
        return super().forward(query, key, value, kv_cache, metadata)
