"""Dense GEMV (csrc ``dense_gemv``, the CUDA platform's linear for 1-4 tokens) against cuBLAS (``F.linear``).

Projections of Llama-3.1-8B (whole, and one rank's share at tensor-parallel size 2) and Llama-3.2-1B
(with its LM head), bf16, 1-4 tokens; timed as CUDA-graph replays over enough weight copies that
they stream from memory. The floor is the weight bytes at the copy rate. ``--splits`` also times the
GEMV at each forced split-K (1, 2 or 4 warps a row). Replayed back to back, the GEMV (a programmatic
dependent on sm_90+) overlaps the call before it.
Needs a CUDA GPU and pagoda-platform-cuda.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.kernel_bench.report import Report, by_m, make_row
from benchmarks.kernel_bench.timing import copies_for, on_gpu, time_each_us

TIMING = "CUDA-graph replays over streamed weight copies, median"
SHAPES = {  # layer: (n, k) of the weight [n, k]
    "8b.qkv": (6144, 4096), "8b.o": (4096, 4096), "8b.gate_up": (28672, 4096), "8b.down": (4096, 14336),
    "8b-tp2.qkv": (3072, 4096), "8b-tp2.o": (4096, 2048), "8b-tp2.gate_up": (14336, 4096), "8b-tp2.down": (4096, 7168),
    "1b.qkv": (3072, 2048), "1b.o": (2048, 2048), "1b.gate_up": (16384, 2048), "1b.down": (2048, 8192),
    "1b.lm_head": (128256, 2048),
}
SMALL = {"8b.o": (4096, 4096), "1b.o": (2048, 2048)}
SPLITS = (1, 2, 4)


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default="1,2,4", help="comma-separated token counts, 1-4 (default %(default)s)")
    p.add_argument("--splits", action="store_true", help="also time each forced split-K (1, 2, 4 warps a row)")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu():
        return "needs a CUDA GPU"
    try:
        from pagoda_platform_cuda.build import load_extension

        load_extension()
    except Exception as exc:  # not installed, or its kernels did not build
        return f"needs pagoda-platform-cuda's kernels (pip install ./plugins/platform_cuda): {exc}"
    return None


def run(args: argparse.Namespace, report: Report) -> None:
    from pagoda_platform_cuda.build import load_extension

    kernels = load_extension()
    tokens = [int(t) for t in args.tokens.split(",")]
    for layer, (n, k) in (SMALL if args.small else SHAPES).items():
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies_for(n * k * 2))]
        for m in tokens:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            us = {"cublas": time_each_us([lambda w=w: F.linear(x, w) for w in weights], graphed=True),
                  "gemv": time_each_us([lambda w=w: kernels.dense_gemv(x, w, None) for w in weights], graphed=True)}
            if args.splits:
                for s in SPLITS:
                    us[f"gemv_split{s}"] = time_each_us([lambda w=w, s=s: kernels.dense_gemv(x, w, None, s)
                                                         for w in weights], graphed=True)
            report.add(make_row({"layer": layer, "n": n, "k": k, "m": m}, us, peer="cublas",
                                floor_us=report.rates.floor_us(nbytes=n * k * 2)))
        del weights
        torch.cuda.empty_cache()
    summarize_layers(report)


def summarize_layers(report: Report) -> None:
    """Per model and token count: a decoder layer's four projections summed, cuBLAS against the GEMV."""
    for model in sorted({r["case"]["layer"].split(".")[0] for r in report.rows}):
        for m, at_m in by_m(report.rows).items():
            rows = [r for r in at_m if r["case"]["layer"].startswith(model + ".")
                    and not r["case"]["layer"].endswith("lm_head")]
            cublas, gemv = (sum(r["us"][name] for r in rows) for name in ("cublas", "gemv"))
            report.summarize(f"{model} decoder layer, {m} tokens: cuBLAS {cublas:.1f} us, GEMV {gemv:.1f} us "
                             f"(x{cublas / gemv:.2f})", model=model, m=m, cublas_us=cublas, gemv_us=gemv)
