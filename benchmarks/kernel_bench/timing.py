"""Timing shared by the kernel benchmarks, and the device's two roofline rates.

On a GPU a call is timed as the median of CUDA-graph replays (as the engine replays decode steps:
no launch overhead) or of launches (as it runs prefills); on a CPU, as the median wall time of a
few calls (smoke runs, not figures).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

STREAM_BYTES = 512 << 20  # weights a timed GPU call touches: well past any L2, so they stream from memory


def on_gpu() -> bool:
    return torch.cuda.is_available()


def device() -> torch.device:
    return torch.device("cuda" if on_gpu() else "cpu")


def platform():
    """The platform the engine would run these kernels on (CUDA's or the CPU's)."""
    from pagoda.plugins import get_plugin_manager

    return get_plugin_manager().registry("platform").select("cuda" if on_gpu() else "cpu")[1]()


def time_us(fn: Callable[[], object], graphed: bool = False, cpu_calls: int = 5) -> float:
    """Median microseconds of one call of ``fn``: CUDA-graph replays if ``graphed``, else launches."""
    if not on_gpu():
        fn()  # warm-up: compilation, first-touch allocation
        samples = []
        for _ in range(cpu_calls):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return 1e6 * statistics.median(samples)
    import triton.testing

    torch.cuda.synchronize()  # graphs are captured on a side stream: the inputs must be ready
    if graphed:
        return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def time_each_us(fns: list[Callable[[], object]], graphed: bool = False) -> float:
    """Median microseconds of one call when ``fns`` (one call over several weight copies, so that the
    weights stream from memory rather than cache) run back to back."""
    return time_us(lambda: [fn() for fn in fns], graphed) / len(fns)


def copies_for(nbytes: int) -> int:
    """Weight copies a timed call cycles through so that the copies together exceed the cache (GPU)."""
    return max(2, -(-STREAM_BYTES // nbytes)) if on_gpu() else 1


@dataclass(frozen=True)
class Rates:
    """What the device sustains: a device-to-device copy (bytes read + written per second, in GB/s) and
    a square matmul (bf16 on a GPU, float32 on a CPU, in TFLOP/s)."""

    copy_gbs: float
    matmul_tflops: float

    def floor_us(self, nbytes: float = 0.0, flops: float = 0.0) -> float:
        """The roofline: the least time to stream ``nbytes`` at the copy rate or do ``flops`` at the matmul rate."""
        return max(nbytes / (self.copy_gbs * 1e3), flops / (self.matmul_tflops * 1e6))


def measure_rates() -> Rates:
    gpu = on_gpu()
    nbytes = (1 << 30) if gpu else (1 << 26)
    src = torch.empty(nbytes, dtype=torch.uint8, device=device())
    dst = torch.empty_like(src)
    copy_us = time_us(lambda: dst.copy_(src), graphed=gpu)
    n = 8192 if gpu else 512
    a = torch.randn(n, n, device=device(), dtype=torch.bfloat16 if gpu else torch.float32)
    matmul_us = time_us(lambda: a @ a)
    return Rates(copy_gbs=2 * nbytes / (copy_us * 1e3), matmul_tflops=2 * n**3 / (matmul_us * 1e6))
