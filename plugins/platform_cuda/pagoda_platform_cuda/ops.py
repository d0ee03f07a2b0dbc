"""CudaOps: the CustomOps contract on the csrc kernels compiled for NVIDIA GPUs (see pagoda.layers.csrc_ops)."""

from __future__ import annotations

from pagoda.layers.csrc_ops import CsrcOps


class CudaOps(CsrcOps):
    name = "cuda"
    # dense layers of one token on the csrc GEMV. The kernel takes up to 4, but from 2 tokens on cuBLAS was
    # faster (H100, 2026-11-27: 8B layer 0.85-0.90x, docs/cuda.md)
    dense_gemv_tokens = 1
