"""Which torch._scaled_mm schemes this torch runs on the CPU (the CPU tests of the torch backend)."""

from __future__ import annotations

import pytest
import torch


def cpu_rowwise_scaled_mm() -> bool:
    """Whether this torch runs ``_scaled_mm`` with row-wise scales on the CPU (2.13 does; 2.11 only
    takes per-tensor scales there)."""
    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16), out_dtype=torch.float32)
    except RuntimeError:
        return False
    return True


needs_cpu_rowwise_scaled_mm = pytest.mark.skipif(
    not cpu_rowwise_scaled_mm(), reason=f"torch {torch.__version__} runs _scaled_mm on the CPU with per-tensor scales only")
