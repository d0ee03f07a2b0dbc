"""Pagoda plugin 'attention-cpu' (distribution pagoda-attention-cpu).

Registers the attention backend ``cpu``: causal attention (decodes and prefills) by a C++ kernel that reads the
paged KV cache in place, the ``torch`` backend's path for the rest, through the ``register_attention_backends``
hook.
"""

from __future__ import annotations

from pagoda.hookspecs import hookimpl


@hookimpl
def register_attention_backends(register) -> None:
    """``cpu``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_attention_cpu.backend import CpuAttentionBackend

    register("cpu", CpuAttentionBackend)
