"""The csrc sources compile with nvcc, without a GPU: the flash attention device code
(csrc/attention/*.cu) and the kernel layer (csrc/kernels/*.cu but awq_tiles.cu, which
plugins/quant_awq/tests/test_awq_tiles_compile.py checks) for sm_80 and sm_90 (plus compute_75
PTX: the pre-sm_80 fallback path), and the torch layer (csrc/*.cpp: the bindings and their argument
checks, host code only) with the host compiler against torch's headers, all of its files in one
translation unit (torch's headers parsed once: 31 s of CPU on two cores, against 134 s file by file; an
include that one file lacks and another's covers goes unseen). A syntax or template error fails here,
not on the GPU machine (the kernel layer's sm_90 paths, e.g. programmatic dependent launch, are not in the
hipified ROCm compile). The sm_90 code is checked where ptxas can lose the source's intent: the reads
before griddepcontrol.wait and the trigger before it (SASS, cuobjdump), and the GEMV bounded to 64
registers without spilling (ptxas's report).

Without nvcc these tests skip, except in CI (``CI=true``), where a missing compiler is a failure.
All compiles start at once (module fixture) and take about two minutes on two cores.
"""

from __future__ import annotations

import os
import re
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
# the CPU wheel of torch ships c10/cuda headers but not the one CMake generates for CUDA builds
CMAKE_MACROS = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"
TORCH_LAYER = "csrc/*.cpp"  # the torch layer's one compile, in `compiles`

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


def torch_layer_sources() -> list[str]:
    """The torch layer: host code, built by the host compiler."""
    return [s.path for s in read_manifest(CSRC) if s.path.endswith(".cpp")]


def kernel_sources() -> list[str]:
    return [s.path for s in read_manifest(CSRC) if s.path.startswith("kernels/") and s.path != "kernels/awq_tiles.cu"]


def torch_includes(stub: Path) -> list[str]:
    import torch

    root = Path(torch.__file__).parent / "include"
    (stub / "c10" / "cuda" / "impl").mkdir(parents=True, exist_ok=True)
    (stub / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").write_text(CMAKE_MACROS)
    return [f"-I{CSRC}", f"-I{root}", f"-I{root / 'torch' / 'csrc' / 'api' / 'include'}", f"-I{stub}",
            f"-I{sysconfig.get_paths()['include']}"]


def cuda_include_dir(compiler: str, scratch: Path) -> Path:
    """The toolkit's include folder, where nvcc itself looks (nvcc may be a wrapper script elsewhere)."""
    (scratch / "empty.cu").write_text("")
    plan = subprocess.run([compiler, "--dryrun", "-c", str(scratch / "empty.cu")], capture_output=True, text=True)
    here = next((line.split("=", 1)[1].strip() for line in plan.stderr.splitlines() if line.startswith("#$ _HERE_=")),
                str(Path(compiler).resolve().parent))
    return Path(here).parent / "include"


@pytest.fixture(scope="module")
def compiles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.Popen]:
    """name -> a running compile (started together; the machine's cores share them)."""
    compiler = nvcc()
    out = tmp_path_factory.mktemp("nvcc")
    jobs: dict[str, list[str]] = {}
    for source in flash_sources() + kernel_sources():
        jobs[source] = [compiler, *NVCC_FLAGS, *ARCHS, "-c", str(CSRC / source), "-o", str(out / (Path(source).stem + ".o"))]
    includes = torch_includes(out / "stub")
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx and Path(sysconfig.get_paths()["include"], "Python.h").is_file():
        cuda_include = cuda_include_dir(compiler, out)
        unity = out / "torch_layer.cpp"
        unity.write_text("".join(f'#include "{CSRC / source}"\n' for source in torch_layer_sources()))
        jobs[TORCH_LAYER] = [cxx, "-std=c++20", "-fsyntax-only", "-w", *includes, f"-I{cuda_include}",
                             "-DTORCH_EXTENSION_NAME=_C", str(unity)]
    procs = {name: subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for name, cmd in jobs.items()}
    for name, proc in procs.items():
        proc.object = out / (Path(name).stem + ".o")
    return procs


def _finish(proc: subprocess.Popen) -> str:
    """The compile's output, once it has ended (kept on the process: several tests read one compile)."""
    if not hasattr(proc, "output"):
        try:
            proc.output, _ = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the compile took more than 10 minutes")
    assert proc.returncode == 0, f"{' '.join(proc.args)}\n{proc.output[-6000:]}"
    return proc.output


@pytest.mark.parametrize("source", flash_sources() + kernel_sources() if (CSRC / "manifest.txt").is_file() else [])
def test_kernels_compile_for_sm80_and_sm90(compiles, source: str) -> None:
    output = _finish(compiles[source])
    for arch in ("sm_80", "sm_90"):
        assert f"for '{arch}'" in output, f"no {arch} code for {source}"
    sys.stdout.write(output)  # register and spill counts (pytest -s shows them)


def test_bounded_gemv_does_not_spill(compiles) -> None:
    """One token at one row a warp runs bounded to 64 registers (four blocks an SM, docs/cuda.md): on sm_90
    each such instantiation fits without spilling, or the bound costs more than it gains."""
    output = _finish(compiles["kernels/dense_gemv.cu"])
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_90'\n.*?\n\s*\d+ bytes stack frame, (\d+) bytes "
                         r"spill stores", output)
    bounded = [(name, spill) for name, spill in entries if re.search(r"dense_gemv_kernel.*Li1ELi1ELi\dELi4E", name)]
    assert len(bounded) == 6, len(bounded)  # 2 dtypes x 3 splits
    assert all(spill == "0" for _, spill in bounded), bounded


def cuobjdump() -> str:
    """The toolkit's cuobjdump, or the one of the nvidia-cuda-cuobjdump wheel (the test extra; its -sass
    runs nvdisasm, which the nvidia-cuda-nvdisasm wheel puts beside it)."""
    found = shutil.which("cuobjdump") or next(
        iter(sorted(Path(sysconfig.get_paths()["purelib"]).glob("nvidia/*/bin/cuobjdump"))), None)
    if found:
        return str(found)
    if os.environ.get("CI") == "true":
        pytest.fail("cuobjdump is missing in CI (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm: the test "
                    "extra has them)")
    pytest.skip("cuobjdump not found; CI has it")


def sm90_functions(compile_: subprocess.Popen) -> dict[str, str]:
    """Mangled name -> SASS of each sm_90 function of a compile's object, once the compile has ended."""
    _finish(compile_)
    sass = subprocess.run([cuobjdump(), "-sass", str(compile_.object)], capture_output=True, text=True,
                          check=True).stdout
    sm90 = sass[sass.index("code for sm_90"):]
    sm90 = sm90[: sm90.find("Fatbin", 1)] if "Fatbin" in sm90 else sm90
    parts = re.split(r"\n\s*Function : ", sm90)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


# Kernels that read weights before griddepcontrol.wait (ACQBULK in SASS): a name pattern and the loads
# (LDG) each instantiation must issue before the wait, from the pattern's groups.
READS_BEFORE_WAIT = {
    # dense_gemv_kernel<T, M, R, S, B>: two blocks of kBlock (4) chunks of each of its R rows
    "kernels/dense_gemv.cu": (r"dense_gemv_kernel.*?Li(\d)ELi(\d)ELi(\d)ELi(\d)E", lambda m, r, s, b: 4 * r * 2),
    # ll_all_reduce_add_rms_norm_kernel<T, C>: the norm's C 16-byte chunks of weights a thread
    "kernels/ll_all_reduce.cu": (r"ll_all_reduce_add_rms_norm_kernel.*?Li(\d)E", lambda c: c),
}


@pytest.mark.parametrize("source", sorted(READS_BEFORE_WAIT))
def test_weights_are_read_before_the_wait(compiles, source: str) -> None:
    """ptxas hoists griddepcontrol.wait above read-only (.nc) loads, so weights read that way before the
    wait were read only after it (docs/cuda.md): each kernel that reads weights early must issue every
    such load before the wait in its sm_90 SASS."""
    pattern, expected = READS_BEFORE_WAIT[source]
    checked = 0
    for name, sass in sm90_functions(compiles[source]).items():
        match = re.search(pattern, name)
        if match is None:
            continue
        wait = sass.find("ACQBULK")
        assert wait >= 0, f"{name}: no griddepcontrol.wait"
        early = sass[:wait].count("LDG")
        assert early == expected(*map(int, match.groups())), f"{name}: {early} loads before the wait"
        checked += 1
    assert checked > 0, f"no instantiation of {pattern} in {source}"


def test_gemv_reads_weights_after_its_pace(compiles) -> None:
    """The dense GEMV's first wave paces its early reads (docs/cuda.md "Paced early reads"): in every
    instantiation's sm_90 SASS the pace's sleep (NANOSLEEP) comes before the first load (LDG), so the
    compiler has not hoisted the weights' requests above it."""
    gemvs = {name: sass for name, sass in sm90_functions(compiles["kernels/dense_gemv.cu"]).items()
             if "dense_gemv_kernel" in name}
    assert gemvs, "no dense_gemv_kernel in dense_gemv.cu"
    for name, sass in gemvs.items():
        assert 0 <= sass.find("NANOSLEEP") < sass.find("LDG"), name


def test_the_flash_reduction_triggers_before_it_waits(compiles) -> None:
    """The flash split reduction lets the next kernel be scheduled before it waits (docs/cuda.md "Trigger
    first"): in its sm_90 SASS a trigger (PREEXIT) precedes the wait (ACQBULK)."""
    reductions = {name: sass for name, sass in sm90_functions(compiles["attention/flash_decode.cu"]).items()
                  if "flash_decode_reduce_kernel" in name}
    assert reductions, "no flash_decode_reduce_kernel in flash_decode.cu"
    for name, sass in reductions.items():
        assert 0 <= sass.find("PREEXIT") < sass.find("ACQBULK"), name


def test_torch_layer_compiles_with_the_host_compiler(compiles) -> None:
    if TORCH_LAYER not in compiles:
        pytest.skip("no host C++ compiler or Python headers")
    _finish(compiles[TORCH_LAYER])
