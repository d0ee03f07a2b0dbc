"""CudaOps: the CustomOps contract on the csrc kernels compiled for NVIDIA GPUs (see pagoda.layers.csrc_ops)."""

from __future__ import annotations

import os

from pagoda.layers.csrc_ops import CsrcOps


class CudaOps(CsrcOps):
    name = "cuda"
    # dense layers of 1-4 tokens on the csrc GEMV (PAGODA_DENSE_GEMV=0: F.linear, for A/B timings)
    dense_gemv_tokens = 0 if os.environ.get("PAGODA_DENSE_GEMV") == "0" else 4
