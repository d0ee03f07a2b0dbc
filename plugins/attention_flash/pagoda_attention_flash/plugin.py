"""Pagoda plugin 'attention-flash' (distribution pagoda-attention-flash).

Registers the attention backend ``flash``: FlashAttention-style kernels over the paged KV cache,
written in CUDA C++ under ``csrc/attention/`` and built by pagoda-platform-cuda, through the
``register_attention_backends`` hook. Priority 60 (triton 50): ``auto`` picks it on NVIDIA GPUs of compute
capability 8.0+ (Ampere, Ada, Hopper) for fp16/bf16 models with head size 64, 128 or 256;
``check()`` says why not elsewhere (no CUDA GPU, an older GPU, ROCm, float32, another head size,
kernels not built).
"""

from __future__ import annotations

from pagoda.hookspecs import hookimpl


@hookimpl
def register_attention_backends(register) -> None:
    """``flash``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    register("flash", FlashAttentionBackend)
