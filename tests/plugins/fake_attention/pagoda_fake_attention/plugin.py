"""Registers the attention backend 'fake-attn': a thin wrapper over the torch reference."""

from __future__ import annotations

import torch

from pagoda.hookspecs import Register, hookimpl
from pagoda.interfaces import AttentionBackend, AttentionMetadata, AttentionSpec, Platform


class FakeAttentionBackend(AttentionBackend):
    """Delegates every forward to the built-in torch backend; outranks it in ``auto``."""

    description = "test fixture: the torch reference behind another name"
    priority = 10

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        from pagoda.attention.torch_ref import TorchAttentionBackend

        self.reference = TorchAttentionBackend(spec, platform)

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        return self.reference.forward(query, key, value, kv_cache, metadata)


@hookimpl
def register_attention_backends(register: Register) -> None:
    register("fake-attn", FakeAttentionBackend)
