"""A plugin whose hook registers one backend, then raises: the registration must be dropped."""

from __future__ import annotations

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.hookspecs import Register, hookimpl


class HalfRegisteredBackend(TorchAttentionBackend):
    """Registered by a hook that then fails, so it must never be selectable."""


@hookimpl
def register_attention_backends(register: Register) -> None:
    register("half-registered", HalfRegisteredBackend)
    raise RuntimeError("broken_hook failed halfway through registering")
