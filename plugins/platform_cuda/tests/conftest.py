"""Fixtures of the CUDA plugin tests (gpu-marked tests skip without CUDA via the pagoda pytest plugin)."""

from __future__ import annotations

import pytest

from pagoda.testing import built_kernels


def _cuda_ops():
    from pagoda_platform_cuda.build import load_extension
    from pagoda_platform_cuda.ops import CudaOps

    return CudaOps(load_extension())


@pytest.fixture(scope="session")
def cuda_ops():
    """CudaOps on the compiled kernels; fails (does not skip) when they cannot be built on a GPU."""
    return built_kernels("pagoda-platform-cuda's kernels", _cuda_ops)
