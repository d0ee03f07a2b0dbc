"""The csrc sources compile with nvcc, without a GPU: the flash attention device code
(csrc/attention/*.cu) and the kernel layer (csrc/kernels/*.cu but awq_tiles.cu, which
plugins/quant_awq/tests/test_awq_tiles_compile.py checks) for sm_80 and sm_90 (plus compute_75
PTX: the pre-sm_80 fallback path), the torch layer of the NVIDIA-only kernels (TORCH_LAYER) against
torch's headers, and bindings.cpp with the host compiler. A syntax or template error fails here, not on
the GPU machine (the kernel layer's sm_90 paths, e.g. programmatic dependent launch, are not in
the hipified ROCm compile).

Without nvcc these tests skip, except in CI (``CI=true``), where a missing compiler is a failure.
All compiles start at once (module fixture) and take about a minute on two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from pagoda.platforms.csrc import read_manifest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
ARCHS = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
         "-gencode", "arch=compute_75,code=compute_75")
NVCC_FLAGS = ("-std=c++20", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-v")
# torch-layer sources of NVIDIA-only kernels (the others compile hipified in the ROCm plugin's test)
TORCH_LAYER = ("attention_flash_kernels.cu", "ll_all_reduce_kernels.cu")
# the CPU wheel of torch ships c10/cuda headers but not the one CMake generates for CUDA builds
CMAKE_MACROS = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"

pytestmark = pytest.mark.skipif(not (CSRC / "manifest.txt").is_file(), reason="needs the repository's csrc/")


def nvcc() -> str:
    found = shutil.which("nvcc") or next(
        (str(p) for p in [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"] if p.is_file()), None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("nvcc is missing in CI (install the CUDA toolkit's compiler, e.g. cuda-nvcc)")
    pytest.skip("nvcc not found; CI has it")


def flash_sources() -> list[str]:
    return [s.path for s in read_manifest(CSRC) if s.path.startswith("attention/")]


def kernel_sources() -> list[str]:
    return [s.path for s in read_manifest(CSRC) if s.path.startswith("kernels/") and s.path != "kernels/awq_tiles.cu"]


def torch_includes(stub: Path) -> list[str]:
    import torch

    root = Path(torch.__file__).parent / "include"
    (stub / "c10" / "cuda" / "impl").mkdir(parents=True, exist_ok=True)
    (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(CMAKE_MACROS)
    return [f"-I{CSRC}", f"-I{root}", f"-I{root / 'torch' / 'csrc' / 'api' / 'include'}", f"-I{stub}",
            f"-I{sysconfig.get_paths()['include']}"]


@pytest.fixture(scope="module")
def compiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.Popen]:
    """name -> a running compile (started together; the machine's cores share them)."""
    compiler = nvcc()
    out = tmp_path_factory.mktemp("nvcc")
    jobs: dict[str, list[str]] = {}
    for source in flash_sources() + kernel_sources():
        jobs[source] = [compiler, *NVCC_FLAGS, *ARCHS, "-c", str(CSRC / source), "-o", str(out / (Path(source).stem + ".o"))]
    includes = torch_includes(out / "stub")
    for source in TORCH_LAYER:
        jobs[source] = [compiler, "-std=c++20", "-O1", "--expt-relaxed-constexpr", "-gencode",
                        "arch=compute_80,code=sm_80", *includes, "-w", "-c", str(CSRC / source), "-o",
                        str(out / (Path(source).stem + ".o"))]
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx and Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        cuda_include = Path(compiler).resolve().parent.parent / "include"
        jobs["bindings.cpp"] = [cxx, "-std=c++20", "-fsyntax-only", "-w", *includes, f"-I{cuda_include}",
                                "-DTORCH_EXTENSION_NAME=_C", str(CSRC / "bindings.cpp")]
    return {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for name, cmd in jobs.items()}


def _finish(proc: subprocess.Popen) -> str:
    try:
        output, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the compile took more than 10 minutes")
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{output[-6000:]}"
    return output


@pytest.mark.parametrize("source", flash_sources() + kernel_sources() if (CSRC / "manifest.txt").is_file() else [])
def test_kernels_compile_for_sm80_and_sm90(compiles, source: str) -> None:
    output = _finish(compiles[source])
    for arch in ("sm_80", "sm_90"):
        assert f"for '{arch}'" in output, f"no {arch} code for {source}"
    sys.stdout.write(output)  # register and spill counts (pytest -s shows them)


@pytest.mark.parametrize("source", TORCH_LAYER)
def test_torch_layer_compiles_against_torch_headers(compiles, source: str) -> None:
    _finish(compiles[source])


def test_bindings_compile(compiles) -> None:
    if "bindings.cpp" not in compiles:
        pytest.skip("no host C++ compiler or Python headers")
    _finish(compiles["bindings.cpp"])
