"""Pagoda plugin 'attention-flash' (distribution pagoda-attention-flash).

Registers the attention backend ``flash``: Pagoda's own FlashAttention-algorithm CUDA kernels
(``csrc/attention/``, built by pagoda-platform-cuda as ``pagoda_platform_cuda._flash``): a
tensor-core prefill over the paged cache and a GQA-aware split-KV decode, through the
``register_attention_backends`` hook. ``check()`` says why it cannot run (no CUDA platform, a
GPU below compute capability 8.0, a dtype or head size the kernels lack, kernels that do not build).
"""

from __future__ import annotations

from pagoda.hookspecs import hookimpl


@hookimpl
def register_attention_backends(register) -> None:
    """``flash``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    register("flash", FlashAttentionBackend)
