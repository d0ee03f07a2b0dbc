"""gpu-marked tests skip without a CUDA device (the repo's tests/conftest.py does not reach here)."""

from __future__ import annotations

import pytest
import torch


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def cuda_ops():
    """CudaOps on the compiled kernels; fails (does not skip) when they cannot be built on a GPU."""
    from pagoda_platform_cuda.build import load_extension
    from pagoda_platform_cuda.ops import CudaOps

    return CudaOps(load_extension())
