"""The built-in CPU platform: always available, runs everything with torch ops."""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import mmap
import os

import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.interfaces.platform import Platform
from pagoda.platforms.cpu_ops import CpuOps

logger = logging.getLogger(__name__)
KV_CACHE_MEMORY_FRACTION = 0.5  # of the memory available once the weights are loaded
LAZY_KV_MIN_BYTES = 1 << 20  # caches at least this large are mapped lazily (kv_cache_tensor)


class CpuPlatform(Platform):
    description = "CPU with torch ops (always available)"
    priority = 0
    device_type = "cpu"

    @classmethod
    def check(cls) -> str | None:
        return None

    def device(self) -> torch.device:
        return torch.device("cpu")

    def describe(self) -> str:
        return f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"

    def default_dtype(self, checkpoint_dtype: torch.dtype | None) -> torch.dtype:
        """float32, except a bfloat16 checkpoint on a CPU that multiplies bfloat16 natively (AVX512-BF16 or AMX),
        where it keeps bfloat16: 1.4x float32's throughput on the development machine (docs/cpu.md)."""
        if checkpoint_dtype == torch.bfloat16 and native_bf16():
            return torch.bfloat16
        return torch.float32

    def overlaps_steps(self) -> bool:
        """No: host work moved beside a step competes with its threads. Served on the 2-core machine, strict turns
        gave a 25% lower time to first token at the same time per output token (docs/cpu.md)."""
        return False

    def prepare_process(self) -> None:
        keep_freed_host_memory()

    def supports_dtype(self, dtype: torch.dtype) -> str | None:
        if dtype == torch.float16:
            return "float16 matmuls are slow and inexact on CPU; use float32 or bfloat16"
        return None

    def custom_ops(self) -> CustomOps:
        return CpuOps()

    def dist_backend(self) -> str | None:
        return "gloo"

    def device_count(self) -> int:
        """CPU ranks are processes: as many as there are cores."""
        return os.cpu_count() or 1

    def kv_cache_bytes(self, requested_bytes: int | None, memory_utilization: float, activation_bytes: int) -> int:
        """The explicit size, else half the memory available now (after the weights) less the activations.
        The engine caps it further at what ``max_num_seqs`` full sequences use, and the pages are committed
        only as blocks are first written (:meth:`kv_cache_tensor`), so a short run holds what it used."""
        if requested_bytes is not None:
            return requested_bytes
        return max(int(available_memory_bytes() * KV_CACHE_MEMORY_FRACTION) - activation_bytes, 0)

    def kv_cache_tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An anonymous memory map: the OS hands out zeroed pages on first touch, so resident memory grows with
        the blocks written, not the cache's size (``torch.zeros`` would write every page at start-up). Private, not
        Python's default shared map: a first touch cost 0.7 µs against 1.1 µs (shared memory's page cache), 3% of
        64 x 128/128 offline. Huge pages (``MADV_HUGEPAGE``) were slower still: the kernel compacts memory to find
        each 2 MB page, in the middle of a step."""
        nbytes = math.prod(shape) * torch.tensor([], dtype=dtype).element_size()
        if nbytes < LAZY_KV_MIN_BYTES:
            return torch.zeros(shape, dtype=dtype)
        pages = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # the tensor keeps the map alive
        return torch.frombuffer(pages, dtype=torch.uint8).view(dtype).view(shape)


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)


@functools.cache
def keep_freed_host_memory() -> bool:
    """glibc's malloc hands every block of 32 MB or more (a prefill's activations) back to the OS when freed and
    maps fresh pages for the next, which the OS then zeroes page by page on first touch; a long prefill spent a
    tenth of its time in those faults. With no maps and no trimming, freed memory stays in the heap for the next
    step: 64 x 128/128 offline ran 8% faster, at 0.3 GB more peak memory. False where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        done = bool(libc.mallopt(M_MMAP_MAX, 0)) and bool(libc.mallopt(M_TRIM_THRESHOLD, 2**31 - 1))
    except (OSError, AttributeError):
        done = False
    if not done:
        logger.debug("the C library is not glibc: the host allocator keeps its defaults")
    return done


@functools.cache
def native_bf16() -> bool:
    """Whether the CPU has bfloat16 dot-product instructions (x86 AVX512-BF16 or AMX-BF16; Arm BF16), from the
    flags Linux lists in /proc/cpuinfo; False where there is no such file."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith(("flags", "Features"))), [])
    except OSError:
        return False
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & set(flags))


def available_memory_bytes() -> int:
    """The memory the OS can give without swapping (Linux's MemAvailable), else the physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
