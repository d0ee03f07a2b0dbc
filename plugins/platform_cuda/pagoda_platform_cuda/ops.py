"""CudaOps: the CustomOps contract on the csrc kernels compiled for NVIDIA GPUs (see pagoda.layers.csrc_ops)."""

from __future__ import annotations

from pagoda.layers.csrc_ops import CsrcOps


class CudaOps(CsrcOps):
    name = "cuda"
