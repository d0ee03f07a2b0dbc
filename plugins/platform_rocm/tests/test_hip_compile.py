"""The HIP path builds: torch's hipify translates csrc, and Debian's hipcc compiles the kernel
layer for gfx90a (MI200) into object files. No ROCm torch and no AMD GPU are involved; the
torch layer needs a ROCm torch and is compiled only on an AMD machine (docs/rocm.md).

hipcc comes from apt (``hipcc libamdhip64-dev``; ``.ci/run`` installs them). Without it these
tests skip, except in CI (``CI=true``), where a missing compiler is a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("pagoda_platform_rocm", reason="pagoda-platform-rocm is not installed")

from pagoda.platforms.csrc import read_manifest  # noqa: E402
from pagoda_platform_rocm.hipify import HIPCC_FLAGS, hipify_csrc, rocm_sources  # noqa: E402

CSRC = Path(__file__).resolve().parents[3] / "csrc"
ARCH = "gfx90a"
CUDA_NAMES = ("cudaStream_t", "cuda_runtime.h", "__nv_bfloat16", "<<<")

pytestmark = pytest.mark.skipif(not (CSRC / "manifest.txt").is_file(), reason="needs the repository's csrc/")


def hipcc() -> str:
    found = shutil.which("hipcc")
    if found:
        return found
    fix = "apt-get install -y --no-install-recommends hipcc libamdhip64-dev"
    if os.environ.get("CI") == "true":
        pytest.fail(f"hipcc is missing in CI; .ci/run should have installed it ({fix})")
    pytest.skip(f"hipcc not found ({fix}); CI installs it")


@pytest.fixture(scope="module")
def hipified(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Manifest path -> its hipified file, for the sources the ROCm build compiles."""
    out = tmp_path_factory.mktemp("hip") / "csrc"
    sources = rocm_sources(read_manifest(CSRC))
    return {s.path: p for s, p in zip(sources, hipify_csrc(CSRC, out, sources))}


def test_hipify_translates_every_source_the_rocm_build_needs(hipified: dict[str, Path]) -> None:
    assert list(hipified) == [s.path for s in read_manifest(CSRC) if s.nvidia_only is None]
    for path, hip in hipified.items():
        text = hip.read_text()
        assert hip.suffix == (".hip" if path.endswith(".cu") else Path(path).suffix), path
        if path.startswith("kernels/"):  # the torch layer keeps torch's c10::cuda names (hipify v2: ROCm torch has them)
            leftovers = [name for name in CUDA_NAMES if name in text]
            assert not leftovers and "hip/hip_runtime.h" in text, f"{path}: CUDA names left after hipify: {leftovers}"
    assert (CSRC / "kernels" / "layernorm.cu").read_text().count("cudaStream_t") > 0  # originals untouched


def test_nvidia_only_sources_are_left_out(tmp_path: Path) -> None:
    src = tmp_path / "csrc"
    (src / "kernels").mkdir(parents=True)
    (src / "kernels" / "plain.cu").write_text("__global__ void plain(float* x) { x[threadIdx.x] = 0.f; }\n")
    (src / "kernels" / "tensor_core.cu").write_text('__global__ void tc() { asm volatile("wgmma.fence.sync.aligned;"); }\n')
    (src / "manifest.txt").write_text("kernels/plain.cu\nkernels/tensor_core.cu  nvidia_only: wgmma (sm_90a)\n")
    paths = hipify_csrc(src, tmp_path / "out", rocm_sources(read_manifest(src)))
    assert [p.relative_to(tmp_path / "out").as_posix() for p in paths] == ["kernels/plain.hip"]
    assert not (tmp_path / "out" / "kernels" / "tensor_core.cu").exists()


def kernel_layer_sources() -> list[str]:
    return [s.path for s in read_manifest(CSRC) if s.kernel_layer and s.nvidia_only is None]


@pytest.fixture(scope="module")
def compiles(hipified: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.Popen]:
    """Manifest path -> its running hipcc compile for gfx90a (all started together: the cores share them)."""
    compiler = hipcc()
    out = tmp_path_factory.mktemp("hipcc")
    procs = {}
    for source in kernel_layer_sources():
        obj = out / (Path(source).stem + ".o")
        cmd = [compiler, "-std=c++17", *HIPCC_FLAGS, f"--offload-arch={ARCH}", "-Werror", "-c", str(hipified[source]),
               "-o", str(obj)]
        # HIP_PLATFORM=amd: hipcc would otherwise target NVIDIA wherever it also finds nvcc
        procs[source] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                         env={**os.environ, "HIP_PLATFORM": "amd"})
        procs[source].object = obj
    return procs


@pytest.mark.parametrize("source", kernel_layer_sources() if (CSRC / "manifest.txt").is_file() else [])
def test_kernel_layer_compiles_with_hipcc_for_gfx90a(compiles: dict[str, subprocess.Popen], source: str) -> None:
    proc = compiles[source]
    try:
        _, errors = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"hipcc took more than 5 minutes on {source}")
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{errors[-4000:]}"
    assert f"amdgcn-amd-amdhsa--{ARCH}".encode() in proc.object.read_bytes(), "no gfx90a code object in the output"
