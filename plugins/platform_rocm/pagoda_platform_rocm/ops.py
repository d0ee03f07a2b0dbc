"""RocmOps: the CustomOps contract on the hipified csrc kernels (see pagoda.layers.csrc_ops)."""

from __future__ import annotations

from pagoda.layers.csrc_ops import CsrcOps


class RocmOps(CsrcOps):
    name = "rocm"
