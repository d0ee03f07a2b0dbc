"""pagoda-platform-cuda on any machine: discovery, check(), the fallback rule, KV sizing, dtypes."""

from __future__ import annotations

import logging

import pytest
import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.testing import load_installed_plugin

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed (pip install it to run this test)")

GiB = 1 << 30


def test_installed_plugin_registers_the_cuda_platform() -> None:
    info = load_installed_plugin("pagoda-platform-cuda", "platform-cuda")
    assert info.module == "pagoda_platform_cuda.plugin"
    assert info.registers == {"platform": ["cuda"]}


def test_check_explains_why_cuda_is_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_platform_cuda.platform import CudaPlatform

    really_available = torch.version.cuda is not None and torch.cuda.is_available()
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    assert "CPU-only build" in CudaPlatform.check()
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert CudaPlatform.check() == "no CUDA device found (torch.cuda.is_available() is False)"
    monkeypatch.undo()
    assert (CudaPlatform.check() is None) == really_available


def test_custom_ops_fall_back_with_one_warning(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    from pagoda_platform_cuda import build, platform

    monkeypatch.setenv("PAGODA_CUDA_KERNELS", "0")
    build.load_extension.cache_clear()
    platform._custom_ops.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="pagoda"):
            first = platform.CudaPlatform().custom_ops()
            second = platform.CudaPlatform().custom_ops()
    finally:
        build.load_extension.cache_clear()
        platform._custom_ops.cache_clear()
    assert type(first) is CustomOps and second is first
    warnings = [r.getMessage() for r in caplog.records if "CUDA kernels unavailable" in r.getMessage()]
    assert warnings == ["pagoda-platform-cuda: CUDA kernels unavailable (PAGODA_CUDA_KERNELS=0 switches the CUDA "
                        "kernels off); using the torch ops"]


def test_extension_unavailable_names_the_reason_without_cuda() -> None:
    from pagoda_platform_cuda import build

    if torch.version.cuda is not None:
        pytest.skip("this torch has CUDA")
    build.load_extension.cache_clear()
    with pytest.raises(build.ExtensionUnavailable, match="has no CUDA"):
        build.load_extension()
    build.load_extension.cache_clear()


def _fake_cuda(monkeypatch: pytest.MonkeyPatch, total: int, free: int, allocated: int, reserved: int) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved)


def test_kv_cache_bytes_subtracts_weights_activations_and_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_platform_cuda.platform import CudaPlatform

    # 80 GiB card: 2 GiB held by another process / the context, 10 GiB weights, 12 GiB reserved by torch
    _fake_cuda(monkeypatch, total=80 * GiB, free=66 * GiB, allocated=10 * GiB, reserved=12 * GiB)
    p = CudaPlatform()
    assert p.kv_cache_bytes(123, 0.9, 5 * GiB) == 123  # an explicit size wins
    assert p.kv_cache_bytes(None, 0.9, 5 * GiB) == int(0.9 * 80 * GiB) - 2 * GiB - 10 * GiB - 5 * GiB
    with pytest.raises(ValueError, match="--gpu-memory-utilization 0.1"):
        p.kv_cache_bytes(None, 0.1, 5 * GiB)


def test_default_dtype_prefers_bf16_for_float32_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_platform_cuda.platform import CudaPlatform

    p = CudaPlatform()
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert [p.default_dtype(d) for d in (None, torch.float32, torch.float16, torch.bfloat16)] == [
        torch.bfloat16, torch.bfloat16, torch.float16, torch.bfloat16]
    # a T4 (sm_75): torch counts its emulated bf16 as supported unless asked for native support
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert [p.default_dtype(d) for d in (None, torch.float32, torch.float16, torch.bfloat16)] == [
        torch.float16, torch.float16, torch.float16, torch.float16]
    assert "compute capability >= 8.0 (this GPU is sm_75); use float16" in p.supports_dtype(torch.bfloat16)


def test_fp8_dtype_from_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagoda_platform_cuda.platform import CudaPlatform

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    for capability, fp8 in [((8, 0), None), ((8, 9), torch.float8_e4m3fn), ((9, 0), torch.float8_e4m3fn)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        assert CudaPlatform().fp8_dtype() == fp8 and CudaPlatform().compute_capability() == capability
    assert CudaPlatform().csrc_kernel_reason("layernorm") is None
