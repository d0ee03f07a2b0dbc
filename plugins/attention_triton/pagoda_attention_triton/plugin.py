"""Pagoda plugin 'attention-triton' (distribution pagoda-attention-triton).

Registers the attention backend ``triton``: paged attention over the block tables for mixed
prefill/decode batches, written in Triton (it runs on CPU under ``TRITON_INTERPRET=1`` for
tests), through the ``register_attention_backends`` hook. ``check()`` says why it cannot run
("triton needs a GPU or TRITON_INTERPRET=1", an unsupported head size or dtype).
"""

from __future__ import annotations

from pagoda.hookspecs import hookimpl


@hookimpl
def register_attention_backends(register) -> None:
    """``triton``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_attention_triton.backend import TritonAttentionBackend

    register("triton", TritonAttentionBackend)
