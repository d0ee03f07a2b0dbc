"""A simulated ROCm build of torch: HIP version, one AMD device, its gfx target and memory."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Callable

import pytest
import torch

GiB = 1 << 30
MI300X = dict(name="AMD Instinct MI300X", gcnArchName="gfx942:sramecc+:xnack-", multi_processor_count=304,
              total_memory=192 * GiB, major=9, minor=4)


@pytest.fixture
def fake_rocm(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``fake_rocm(**device_properties)``: torch looks like a ROCm build with that device (an MI300X by default)."""

    def install(**props: object) -> None:
        from pagoda_platform_rocm import platform

        platform._custom_ops.cache_clear()
        monkeypatch.setattr(torch.version, "hip", "6.4.43482")
        monkeypatch.setattr(torch.version, "cuda", None)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        properties = SimpleNamespace(**{**MI300X, **props})
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: properties)

    yield install
    from pagoda_platform_rocm import platform

    platform._custom_ops.cache_clear()


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch looks like a CUDA build with an sm_90 device."""
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
