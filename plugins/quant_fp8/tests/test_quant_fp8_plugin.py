"""pagoda-quant-fp8 loads through entry-point discovery, registers ``fp8`` (refusing CPUs and old GPUs) and
``int8`` (CPUs and NVIDIA GPUs from sm_80)."""

from __future__ import annotations

import pytest
import torch

from pagoda.errors import IncompatibleChoiceError
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins import PluginManager
from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_fp8_and_int8() -> None:
    info = load_installed_plugin("pagoda-quant-fp8", "quant-fp8")
    assert info.module == "pagoda_quant_fp8.plugin"
    assert info.registers == {"quantization": ["fp8", "int8"]}


class _FakeGpu(CpuPlatform):
    def __init__(self, fp8: torch.dtype | None, name: str) -> None:
        self.fp8, self.name = fp8, name

    def fp8_dtype(self) -> torch.dtype | None:
        return self.fp8

    def describe(self) -> str:
        return self.name


def test_check_names_the_missing_capability() -> None:
    pytest.importorskip("pagoda_quant_fp8")
    registry = PluginManager().registry("quantization")
    with pytest.raises(IncompatibleChoiceError, match=r"fp8 needs compute capability >= 8.9.*\(CPU .*has none\)"):
        registry.select("fp8", platform=CpuPlatform())
    with pytest.raises(IncompatibleChoiceError, match=r"fp8 needs compute capability >= 8.9.*NVIDIA A100 \(sm_80"):
        registry.select("fp8", platform=_FakeGpu(None, "NVIDIA A100 (sm_80, 79.1 GiB)"))
    with pytest.raises(IncompatibleChoiceError, match=r"computes FP8 as torch.float8_e4m3fnuz"):
        registry.select("fp8", platform=_FakeGpu(torch.float8_e4m3fnuz, "AMD MI300X (gfx942)"))
    assert registry.select("fp8", platform=_FakeGpu(torch.float8_e4m3fn, "NVIDIA H100 (sm_90)"))[0] == "fp8"


def test_int8_runs_on_cpus_and_gpus_and_names_what_it_needs_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pagoda_quant_fp8")
    from pagoda_platform_cuda.platform import CudaPlatform
    from pagoda_platform_rocm.arch import parse_arch
    from pagoda_platform_rocm.platform import RocmPlatform

    registry = PluginManager().registry("quantization")
    assert registry.select("int8", platform=CpuPlatform())[0] == "int8"

    class Xpu(_FakeGpu):
        device_type = "xpu"

    with pytest.raises(IncompatibleChoiceError,
                       match=r"int8 runs on NVIDIA GPUs \(compute capability >= 8.0\), AMD GPUs and CPUs, not on Intel Max"):
        registry.select("int8", platform=Xpu(None, "Intel Max"))

    class Nvidia(CudaPlatform):
        def describe(self) -> str:
            return "NVIDIA GPU"

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    with pytest.raises(IncompatibleChoiceError, match=r"int8 cannot run on NVIDIA GPU: int8 matmuls need compute "
                                                      r"capability >= 8.0 \(int8 tensor cores; this GPU is sm_75\)"):
        registry.select("int8", platform=Nvidia())
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert registry.select("int8", platform=Nvidia())[0] == "int8"

    class Mi300(RocmPlatform):  # ROCm reports gfx942 as capability (9, 4): no NVIDIA rule applies
        def arch(self):
            return parse_arch("gfx942")

    assert registry.select("int8", platform=Mi300())[0] == "int8"
