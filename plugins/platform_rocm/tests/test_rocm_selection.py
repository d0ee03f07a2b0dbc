"""Selection on a simulated ROCm torch: ``auto`` never lands on CUDA-only plugins, and asking
for one says why, through the registry's ``check()`` reasons (both platform plugins installed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pagoda.errors import IncompatibleChoiceError
from pagoda.hookspecs import hookimpl
from pagoda.interfaces.attention import AttentionBackend
from pagoda.quantization.unquantized import UnquantizedMethod
from pagoda.plugins.manager import PluginManager

pytest.importorskip("pagoda_platform_rocm", reason="pagoda-platform-rocm is not installed")

MANIFEST = """\
kernels/layernorm.cu
attention/flash_fwd.cu   nvidia_only: mma.sync and wgmma tensor-core instructions
kernels/awq_gemm.cu      nvidia_only: ldmatrix + mma.sync int4 path
bindings.cpp
"""


class FakeFlash(AttentionBackend):
    """Stands for a backend on csrc kernels that use NVIDIA-only instructions."""

    priority = 100

    @classmethod
    def check(cls, platform, spec=None):
        return platform.csrc_kernel_reason("attention")

    def forward(self, query, key, value, kv_cache, metadata):
        raise NotImplementedError


class FakeAwq(UnquantizedMethod):
    """Stands for a method on NVIDIA-only csrc kernels (dense weights: only ``check`` matters here)."""

    @classmethod
    def check(cls, platform):
        return platform.csrc_kernel_reason("awq_gemm")


def _manager() -> PluginManager:
    fakes = SimpleNamespace(
        register_attention_backends=hookimpl(lambda register: register("fake-flash", FakeFlash)),
        register_quantization_methods=hookimpl(lambda register: register("fake-awq", FakeAwq)),
    )
    return PluginManager(modules={"fake-nvidia-kernels": fakes})


@pytest.fixture
def csrc_with_nvidia_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from pagoda_platform_rocm import build

    (tmp_path / "manifest.txt").write_text(MANIFEST)
    monkeypatch.setattr(build, "source_dir", lambda: tmp_path)
    return tmp_path


def test_auto_picks_rocm_and_cuda_refuses_a_hip_torch(fake_rocm) -> None:
    fake_rocm()
    platforms = PluginManager().registry("platform")
    assert platforms.select("auto")[0] == "rocm"
    if "cuda" not in platforms:
        pytest.skip("pagoda-platform-cuda is not installed: no conflict to resolve")
    with pytest.raises(IncompatibleChoiceError) as error:
        platforms.select("cuda")
    assert "is a ROCm build (use platform 'rocm'); install a CUDA build of torch" in str(error.value)
    usable = ", ".join(sorted(name for name in ("cpu", "cpu-native", "rocm") if name in platforms))  # as installed
    assert str(error.value).endswith(f"Usable here: {usable}.")


def test_auto_picks_cuda_and_rocm_refuses_a_cuda_torch(fake_cuda) -> None:
    platforms = PluginManager().registry("platform")
    with pytest.raises(IncompatibleChoiceError) as error:
        platforms.select("rocm")
    assert "is a CUDA build (use platform 'cuda'); install a ROCm build of torch" in str(error.value)
    if "cuda" in platforms:
        assert platforms.select("auto")[0] == "cuda"


def test_cuda_only_kernels_are_refused_under_rocm_with_the_reason(fake_rocm, csrc_with_nvidia_only) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    pytest.importorskip("pagoda_attention_triton", reason="pagoda-attention-triton is not installed")
    fake_rocm()
    pm, platform = _manager(), RocmPlatform()
    attention = pm.registry("attention")
    assert attention.select("auto", platform=platform)[0] == "triton"  # fake-flash ranks higher but refuses
    with pytest.raises(IncompatibleChoiceError) as error:
        attention.select("fake-flash", platform=platform)
    assert ("csrc/attention/flash_fwd.cu uses NVIDIA-only instructions (mma.sync and wgmma tensor-core "
            "instructions), so the ROCm build leaves it out") in str(error.value)
    with pytest.raises(IncompatibleChoiceError, match=r"csrc/kernels/awq_gemm.cu uses NVIDIA-only instructions"):
        pm.registry("quantization").select("fake-awq", platform=platform)
    assert platform.csrc_kernel_reason("layernorm") is None


def test_the_same_backends_are_chosen_under_cuda(fake_cuda, csrc_with_nvidia_only) -> None:
    cuda = pytest.importorskip("pagoda_platform_cuda.platform", reason="pagoda-platform-cuda is not installed")
    pm, platform = _manager(), cuda.CudaPlatform()
    assert pm.registry("attention").select("auto", platform=platform)[0] == "fake-flash"
    assert pm.registry("quantization").select("fake-awq", platform=platform)[0] == "fake-awq"
