"""pagoda-platform-rocm on any machine: discovery, check(), device properties, dtypes, KV sizing.

No AMD GPU is needed: ``fake_rocm`` (conftest.py) makes torch look like a ROCm build.
"""

from __future__ import annotations

import logging

import pytest
import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.testing import load_installed_plugin

pytest.importorskip("pagoda_platform_rocm", reason="pagoda-platform-rocm is not installed (pip install it to run this test)")

GiB = 1 << 30


def test_installed_plugin_registers_the_rocm_platform() -> None:
    info = load_installed_plugin("pagoda-platform-rocm", "platform-rocm")
    assert info.module == "pagoda_platform_rocm.plugin"
    assert info.registers == {"platform": ["rocm"]}


def test_check_explains_why_rocm_is_unusable(monkeypatch: pytest.MonkeyPatch, fake_rocm) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert RocmPlatform.check() == f"torch {torch.__version__} is a CPU-only build; install a ROCm build of torch"
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert "is a CUDA build (use platform 'cuda')" in RocmPlatform.check()
    fake_rocm()
    assert RocmPlatform.check() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert RocmPlatform.check().startswith("no ROCm device found (torch.cuda.is_available() is False; torch ")


def test_describe_names_the_gfx_target(fake_rocm) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    fake_rocm()
    p = RocmPlatform()
    assert p.describe() == "AMD Instinct MI300X (gfx942, 304 CUs, 192.0 GiB, HIP 6.4.43482)"
    assert (p.device(), p.device_type, p.compute_units(), p.supports_graphs()) == (torch.device("cuda", 0), "cuda", 304, True)
    assert p.compute_capability() is None  # gfx versions are not NVIDIA compute capabilities


@pytest.mark.parametrize(
    ("arch", "fp8"),
    [("gfx90a:sramecc+:xnack-", None), ("gfx942:sramecc+:xnack-", torch.float8_e4m3fnuz), ("gfx950", torch.float8_e4m3fn)],
)
def test_fp8_variant_follows_the_gfx_target(fake_rocm, arch: str, fp8: torch.dtype | None) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    fake_rocm(gcnArchName=arch)
    p = RocmPlatform()
    assert p.fp8_dtype() == fp8
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert p.supports_dtype(dtype) is None
    if fp8 is None:
        assert "has no FP8 arithmetic" in p.supports_dtype(torch.float8_e4m3fn)
        return
    other = torch.float8_e4m3fn if fp8 == torch.float8_e4m3fnuz else torch.float8_e4m3fnuz
    assert p.supports_dtype(fp8) is None
    assert p.supports_dtype(other) == (f"{arch.split(':')[0]} computes FP8 as {fp8} (not {other}); "
                                       f"convert the weights to {fp8}")


def test_kv_cache_bytes_from_free_memory(monkeypatch: pytest.MonkeyPatch, fake_rocm) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    fake_rocm()
    # 192 GiB MI300X: 3 GiB held by another process / the HIP context, 16 GiB weights, 20 GiB reserved by torch
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (169 * GiB, 192 * GiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 16 * GiB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 20 * GiB)
    p = RocmPlatform()
    assert p.kv_cache_bytes(None, 0.9, 4 * GiB) == int(0.9 * 192 * GiB) - 3 * GiB - 16 * GiB - 4 * GiB
    assert p.kv_cache_bytes(7, 0.9, 4 * GiB) == 7
    with pytest.raises(ValueError, match="no GPU memory left for the KV cache"):
        p.kv_cache_bytes(None, 0.1, 4 * GiB)


def test_csrc_kernel_reason_and_torch_op_fallback(monkeypatch: pytest.MonkeyPatch, caplog, fake_rocm, tmp_path) -> None:
    from pagoda_platform_rocm import build
    from pagoda_platform_rocm.platform import RocmPlatform

    (tmp_path / "manifest.txt").write_text("kernels/layernorm.cu\n")
    monkeypatch.setattr(build, "source_dir", lambda: tmp_path)  # installed copies may come without csrc
    fake_rocm(gcnArchName="gfx1100")  # RDNA 3: 32-wide wavefronts
    p = RocmPlatform()
    assert "64-wide wavefronts" in p.csrc_kernel_reason("layernorm")
    with caplog.at_level(logging.WARNING, logger="pagoda"):
        assert type(p.custom_ops()) is CustomOps
    assert "gfx1100 runs 32-wide); using the torch ops" in caplog.text
    fake_rocm()  # gfx942
    assert RocmPlatform().csrc_kernel_reason("layernorm") is None
    monkeypatch.setattr(build, "source_dir", lambda: None)
    assert RocmPlatform().csrc_kernel_reason("layernorm") == "the csrc sources are not installed with pagoda-platform-rocm"
    monkeypatch.setenv("PAGODA_ROCM_KERNELS", "0")
    build.load_extension.cache_clear()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pagoda"):
        assert type(RocmPlatform().custom_ops()) is CustomOps
    build.load_extension.cache_clear()
    assert "PAGODA_ROCM_KERNELS=0 switches the ROCm kernels off" in caplog.text


def test_first_use_build_explains_a_torch_without_hip() -> None:
    from pagoda_platform_rocm import build

    if torch.version.hip is not None:
        pytest.skip("this torch has HIP")
    build.load_extension.cache_clear()
    with pytest.raises(build.ExtensionUnavailable, match="has no HIP"):
        build.load_extension("gfx942")
    build.load_extension.cache_clear()
