"""pagoda-quant-fp8 loads through entry-point discovery, registers ``fp8`` and refuses CPUs/old GPUs."""

from __future__ import annotations

import pytest

from pagoda.errors import IncompatibleChoiceError
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins import PluginManager
from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_fp8() -> None:
    info = load_installed_plugin("pagoda-quant-fp8", "quant-fp8")
    assert info.module == "pagoda_quant_fp8.plugin"
    assert info.registers == {"quantization": ["fp8"]}


class _FakeGpu(CpuPlatform):
    def __init__(self, capability: tuple[int, int]) -> None:
        self.capability = capability

    def compute_capability(self) -> tuple[int, int]:
        return self.capability


def test_check_names_the_missing_capability() -> None:
    pytest.importorskip("pagoda_quant_fp8")
    registry = PluginManager().registry("quantization")
    with pytest.raises(IncompatibleChoiceError, match=r"fp8 needs an NVIDIA GPU of compute capability >= 8.9"):
        registry.select("fp8", platform=CpuPlatform())
    with pytest.raises(IncompatibleChoiceError, match=r"fp8 needs compute capability >= 8.9 \(this GPU is sm_80\)"):
        registry.select("fp8", platform=_FakeGpu((8, 0)))
    for capability in ((8, 9), (9, 0), (10, 0)):
        assert registry.select("fp8", platform=_FakeGpu(capability))[0] == "fp8"
