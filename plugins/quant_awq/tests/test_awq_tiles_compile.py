"""The AWQ tiles kernel layer (csrc/kernels/awq_tiles.cu, torch-free) compiles with nvcc for sm_80
and sm_90 without register spills, and the decode-size kernels (one or two 8-token tiles, the fold
path) fit two 256-thread blocks per SM (<= 128 registers). No GPU is needed. Without nvcc this skips, except in CI
(``CI=true``), where a missing compiler is a failure."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[3] / "csrc"
SOURCE = CSRC / "kernels" / "awq_tiles.cu"
ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
USAGE = re.compile(r"Used (\d+) registers")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")

pytestmark = pytest.mark.skipif(not SOURCE.is_file(), reason="needs the repository's csrc/")


def nvcc() -> str:
    found = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).is_file()), None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("nvcc is missing in CI; install the CUDA toolkit's compiler")
    pytest.skip("nvcc not found")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The object file for sm_80 and sm_90, and ptxas's -v report (the two archs compiled side by side)."""
    obj = tmp_path_factory.mktemp("awq") / "awq_tiles.o"
    cmd = [nvcc(), "-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xptxas", "-v", "-Werror", "all-warnings",
           "--threads", "2",
           "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90",
           "-I", str(CSRC), "-c", str(SOURCE), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stderr[-4000:]}"
    return obj, proc.stderr


@pytest.fixture(scope="module")
def ptxas_report(compiled: tuple[Path, str]) -> dict[tuple[str, str], tuple[int, int]]:
    """(kernel, arch) -> (registers, spill bytes) from ptxas -v."""
    stderr = compiled[1]
    report, current = {}, None
    for line in stderr.splitlines():
        if match := ENTRY.search(line):
            current = match.groups()
        elif current and (match := SPILL.search(line)):
            spill = int(match.group(1)) + int(match.group(2))
            report[current] = (report.get(current, (0, 0))[0], spill)
        elif current and (match := USAGE.search(line)):
            report[current] = (int(match.group(1)), report.get(current, (0, 0))[1])
    return report


def test_every_kernel_compiles_for_sm80_and_sm90_without_spills(ptxas_report) -> None:
    gemms = {k: v for k, v in ptxas_report.items() if "awq_tiles_gemm_kernel" in k[0]}
    # 2 dtypes x 3 token-tile counts x 3 group sizes, per arch
    assert sorted({arch for _, arch in gemms}) == ["sm_80", "sm_90"] and len(gemms) == 36, sorted(gemms)
    assert any("awq_tiles_dequantize_kernel" in name for name, _ in ptxas_report)
    spilled = {k: v for k, v in ptxas_report.items() if v[1]}
    assert not spilled, f"register spills: {spilled}"


def test_decode_kernels_fit_two_blocks_per_sm(ptxas_report) -> None:
    fold = {k: regs for k, (regs, _) in ptxas_report.items() if re.search(r"gemm_kernelI\w*?(?:bfloat16|half)Li[12]E", k[0])}
    assert len(fold) == 24, sorted(fold)
    assert max(fold.values()) <= 128, fold


def cuobjdump() -> str:
    """CUDA's cuobjdump: on PATH, beside nvcc, or the copy triton ships (triton is a dependency)."""
    beside = Path(os.path.realpath(nvcc())).parent / "cuobjdump"
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    except ImportError:
        bundled = beside
    found = shutil.which("cuobjdump") or next((str(p) for p in (beside, bundled) if p.is_file()), None)
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("cuobjdump is missing in CI (it comes with triton's NVIDIA backend)")
    pytest.skip("cuobjdump not found")


def test_no_float_to_byte_conversions_in_sass(compiled) -> None:
    """ptxas (CUDA 13.0) once compiled the byte stores of a memcpy'd fp16/bf16 array as F2I.U8.F16
    conversions of the values: every split-K output kept its high byte only. No kernel here converts
    a float to a byte, so any F2I.U8 in the SASS is that miscompilation."""
    sass = subprocess.run([cuobjdump(), "-sass", str(compiled[0])], capture_output=True, text=True, timeout=300)
    assert sass.returncode == 0, sass.stderr[-2000:]
    assert "awq_tiles_gemm_kernel" in sass.stdout
    assert "F2I.U8" not in sass.stdout, "a float-to-u8 conversion in the SASS: see csrc/kernels/awq_tiles.cu pack_pair"
