"""The CPU platform's defaults. ``dtype="auto"``: float32, except a bfloat16 checkpoint where the CPU has bfloat16 dot
products (it is 1.4x float32's throughput there); the flags come from /proc/cpuinfo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pagoda.platforms import cpu
from pagoda.platforms.cpu import CpuPlatform


@pytest.mark.parametrize("native, checkpoint, expected", [
    (True, torch.bfloat16, torch.bfloat16),
    (False, torch.bfloat16, torch.float32),
    (True, torch.float32, torch.float32),
    (True, torch.float16, torch.float32),  # float16 matmuls are slow on CPUs
    (True, None, torch.float32),
])
def test_auto_dtype(monkeypatch, native, checkpoint, expected):
    monkeypatch.setattr(cpu, "native_bf16", lambda: native)
    assert CpuPlatform().default_dtype(checkpoint) == expected


@pytest.mark.parametrize("flags, native", [("fpu avx512f avx512_bf16 sse", True), ("fpu amx_bf16", True),
                                           ("fpu avx512f avx2", False)])
def test_native_bf16_reads_the_cpu_flags(monkeypatch, tmp_path, flags, native):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path, *a, **k))
    cpu.native_bf16.cache_clear()
    try:
        assert cpu.native_bf16() is native
    finally:
        cpu.native_bf16.cache_clear()


REUSE_SCRIPT = """
import resource, sys, torch
from pagoda.platforms.cpu import CpuPlatform
if sys.argv[1] == "prepared":
    CpuPlatform().prepare_process()
faults = []
for _ in range(8):  # a step's 64 MB of activations, allocated and freed 8 times
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 << 18)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    del x
print(sum(faults[4:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator")
def test_prepared_process_reuses_freed_memory_without_page_faults():
    """After ``prepare_process`` freed activations are reused from the heap: once the heap has grown, allocating
    64 MB again touches no fresh pages. By default glibc unmaps such blocks when freed, and each new one faults in
    all 16k pages again."""
    faults = {mode: int(subprocess.run([sys.executable, "-c", REUSE_SCRIPT, mode], capture_output=True, text=True,
                                       check=True).stdout) for mode in ("default", "prepared")}
    assert faults["default"] > 4 * 15_000 and faults["prepared"] < 1_000, faults
