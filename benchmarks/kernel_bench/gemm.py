"""bf16 GEMMs of Llama-3.1-8B's projections by each path torch offers, against the roofline.

What a GEMM faster than the engine's would buy at matched limits (docs/performance.md, "Where the time
goes": at M = 256 the decode step's GEMMs run at about 1.3x their floor). Implementations: ``default``
(``F.linear`` as the engine calls it: cuBLAS on CUDA; the peer), ``cublaslt`` (the same call with
``torch.backends.cuda.preferred_blas_library("cublaslt")``) and, at ``--inductor-tokens``, ``inductor``
(``torch.compile(mode="max-autotune-no-cudagraphs")``: Inductor's Triton GEMM templates, persistent TMA ones
included, benchmarked against cuBLAS for the shape; its log shows the table). PyTorch's TunableOp is not among
them: on CUDA its only GEMM is cuBLAS's default. M is a step's tokens: 64-512 decodes, 8192 a full prefill
step. CUDA-graph replays over streamed weight copies; the floor is the larger of the weight bytes at the copy
rate and the FLOPs at the matmul rate. On a CPU (``--small``) only ``default`` runs: a smoke run.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Callable, Iterator

import torch
import torch._inductor.config
import torch.nn.functional as F

from benchmarks.kernel_bench.report import Report, by_m, make_row, summed_us
from benchmarks.kernel_bench.timing import copies_for, device, on_gpu, time_each_us

TIMING = "CUDA-graph replays over streamed weight copies, median"
SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}  # (n, k)
SMALL = {"o": (256, 256), "gate_up": (1024, 256)}


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default="64,128,256,512,1024,8192", help="comma-separated M (default %(default)s)")
    p.add_argument("--inductor-tokens", default="256,8192",
                   help="M at which Inductor's max-autotune GEMM is timed too (its tuning takes a while; "
                        "comma-separated, empty for none; default %(default)s)")


def unavailable(args: argparse.Namespace) -> str | None:
    return None if on_gpu() or args.small else "needs a CUDA GPU (or --small for a CPU smoke run)"


@contextlib.contextmanager
def blas_library(name: str) -> Iterator[None]:
    before = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(name)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(before)


def timed_calls(x: torch.Tensor, weights: list[torch.Tensor]) -> float:
    return time_each_us([lambda w=w: F.linear(x, w) for w in weights], graphed=on_gpu())


def time_paths(x: torch.Tensor, weights: list[torch.Tensor], inductor: bool) -> dict[str, float]:
    us = {"default": timed_calls(x, weights)}
    if not on_gpu():
        return us
    with blas_library("cublaslt"):
        us["cublaslt"] = timed_calls(x, weights)
    return {**us, **(time_inductor(x, weights) if inductor else {})}


def time_inductor(x: torch.Tensor, weights: list[torch.Tensor]) -> dict[str, float]:
    """Inductor's max-autotune GEMM (tuned on the first call); a template that cannot be captured in a CUDA graph
    is timed as launches, under another name."""
    torch._inductor.config.triton.enable_persistent_tma_matmul = True  # Hopper's TMA templates among them
    compiled: Callable = torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)
    compiled(x, weights[0])
    calls = [lambda w=w: compiled(x, w) for w in weights]
    try:
        return {"inductor": time_each_us(calls, graphed=True)}
    except RuntimeError as exc:
        print(f"  inductor not capturable ({str(exc).splitlines()[0]}); timed as launches", flush=True)
        return {"inductor_launched": time_each_us(calls)}


def run(args: argparse.Namespace, report: Report) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    dtype = torch.bfloat16 if on_gpu() else torch.float32
    tokens = [int(t) for t in args.tokens.split(",")] if not args.small else [1, 16]
    inductor_tokens = {int(t) for t in args.inductor_tokens.split(",") if t}
    for layer, (n, k) in (SMALL if args.small else SHAPES).items():
        weights = [torch.randn(n, k, device=device(), dtype=dtype) / k**0.5 for _ in range(copies_for(n * k * 2))]
        for m in tokens:
            x = torch.randn(m, k, device=device(), dtype=dtype)
            us = time_paths(x, weights, on_gpu() and m in inductor_tokens)
            floor = report.rates.floor_us(nbytes=n * k * weights[0].element_size(), flops=2 * m * n * k)
            report.add(make_row({"layer": layer, "n": n, "k": k, "m": m}, us, peer="default", floor_us=floor))
        del weights
        torch.cuda.empty_cache()
    summarize_layers(report)


def summarize_layers(report: Report) -> None:
    """Per M: a decoder layer's four projections summed, each path against the default and the floor."""
    for m, rows in by_m(report.rows).items():
        floor, total = sum(r["floor_us"] for r in rows), summed_us(rows)
        cells = ", ".join(f"{p} {t:.1f} us ({total['default'] / t:.2f}x, {floor / t:.0%} of floor)"
                          for p, t in total.items())
        report.summarize(f"decoder layer's GEMMs, M = {m}: floor {floor:.1f} us; {cells}", m=m, floor_us=floor,
                         us={p: round(t, 2) for p, t in total.items()})
