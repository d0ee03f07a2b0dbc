"""Shared test setup: `gpu` tests skip without CUDA."""

from __future__ import annotations

import pytest
import torch

# Tests run tiny models: one intra-op thread avoids OpenMP spin contention on small CI machines
# (with 2 threads on a busy 2-core machine a 8x64x128 matmul took 20 ms instead of 10 us).
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
