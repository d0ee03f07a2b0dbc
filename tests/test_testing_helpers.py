"""pagoda.testing.built_kernels: a GPU test skips without a GPU and fails, naming the build error, on a
machine with one whose kernels did not build. The GPU is simulated (torch.cuda.is_available, torch.version.hip)."""

from __future__ import annotations

import pytest
import torch

from pagoda.platforms.csrc import ExtensionUnavailable
from pagoda.testing import built_kernels, gpu_kind

BUILD_ERROR = "build error: nvcc fatal : Unsupported gpu architecture 'compute_100a'"


def broken_build():
    raise ExtensionUnavailable(BUILD_ERROR)


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch):
    """``machine(kind)``: torch sees a ``"cuda"`` GPU, a ``"rocm"`` one, or none (``None``)."""

    def pretend(kind: str | None) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: kind is not None)
        monkeypatch.setattr(torch.version, "hip", "6.4.43482" if kind == "rocm" else None)

    return pretend


@pytest.mark.parametrize("kind", [None, "cuda", "rocm"])
def test_gpu_kind(machine, kind: str | None) -> None:
    machine(kind)
    assert gpu_kind() == kind


def test_without_a_gpu_the_test_skips_before_building(machine) -> None:
    machine(None)
    with pytest.raises(pytest.skip.Exception, match=r"needs an NVIDIA GPU \(CUDA\)"):
        built_kernels("the CUDA kernels", pytest.fail)  # never called: no build attempt without a GPU


def test_on_a_gpu_a_failed_build_fails_the_test_naming_the_error(machine) -> None:
    machine("cuda")
    with pytest.raises(pytest.fail.Exception) as failed:
        built_kernels("pagoda-platform-cuda's kernels", broken_build)
    assert str(failed.value) == (
        "pagoda-platform-cuda's kernels did not build on this cuda machine: ExtensionUnavailable: " + BUILD_ERROR
    )


def test_on_a_gpu_a_skip_inside_the_loader_fails_too(machine) -> None:
    machine("cuda")
    with pytest.raises(pytest.fail.Exception, match="did not build on this cuda machine: Skipped: .*not installed"):
        built_kernels("the flash kernels", lambda: pytest.importorskip("pagoda_no_such_plugin", reason="not installed"))


def test_on_a_gpu_built_kernels_are_returned(machine) -> None:
    machine("cuda")
    kernels = object()
    assert built_kernels("the CUDA kernels", lambda: kernels) is kernels


def test_the_gpu_must_be_of_the_kind_the_kernels_are_for(machine) -> None:
    machine("rocm")
    with pytest.raises(pytest.skip.Exception, match=r"needs an NVIDIA GPU \(CUDA\)"):
        built_kernels("the CUDA kernels", broken_build)
    with pytest.raises(pytest.fail.Exception, match="did not build on this rocm machine: ExtensionUnavailable"):
        built_kernels("the HIP kernels", broken_build, gpu="rocm")
    with pytest.raises(ValueError, match="gpu='metal': choose one of cuda, rocm"):
        built_kernels("the kernels", broken_build, gpu="metal")
