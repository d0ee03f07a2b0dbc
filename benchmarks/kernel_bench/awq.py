"""AWQ int4 linear layers (group 128) against the dense matmul (``F.linear``, cuBLAS) at Llama-3.1-8B's
projections (fused qkv, o, fused gate/up, down), M = 1..256 tokens. Kernels: on the tiles layout,
``tiles`` (tensor cores, csrc ``awq_tiles_gemm``, its own split-K plan) and ``tiles_dense`` (dequantize,
then cuBLAS); on the checkpoint layout, ``cuda`` (csrc GEMV, M <= 8), ``triton`` (fused dequant + dot)
and ``dense`` (dequantize, then cuBLAS). Timed as CUDA-graph replays over enough weight copies that
they stream from memory; the floor is the int4 weights, scales and zeros at the copy rate.
Needs a CUDA GPU and pagoda-quant-awq (its csrc kernels from pagoda-platform-cuda).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from benchmarks.kernel_bench.report import Report, by_m, make_row, summed_us
from benchmarks.kernel_bench.timing import copies_for, on_gpu, time_each_us

TIMING = "CUDA-graph replays over streamed weight copies, median"
SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}  # (k, n)
TOKENS = "1,2,4,8,16,64,256"
GROUP = 128
KERNELS = ("tiles", "tiles_dense", "cuda", "triton", "dense")


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", default=TOKENS, help="comma-separated token counts M (default %(default)s)")
    p.add_argument("--kernels", default=",".join(KERNELS), help="comma-separated of: %(default)s")
    p.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                   help="activations (and the dense peer); AutoAWQ checkpoints run in float16")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu():
        return "needs a CUDA GPU"
    try:
        import pagoda_quant_awq.dispatch  # noqa: F401
    except ImportError as exc:
        return f"needs pagoda-quant-awq (pip install ./plugins/quant_awq): {exc}"
    return None


def random_int32(*shape: int) -> torch.Tensor:
    return torch.randint(-(2**31), 2**31 - 1, shape, dtype=torch.int32, device="cuda")


def checkpoint_weights(k: int, n: int):
    """Random AWQ weights in the checkpoint layout: (qweight, qzeros, scales)."""
    return random_int32(k, n // 8), random_int32(k // GROUP, n // 8), (torch.rand(k // GROUP, n, device="cuda") * 0.02).half()


def tiles_weights(k: int, n: int, dtype: torch.dtype):
    """Random weights already in the tiles layout (random bits time as well as repacked ones)."""
    from pagoda_quant_awq.tiles import AwqTiles

    scales = (torch.rand(k // GROUP, n // 64, 8, 8, device="cuda") * 0.02).to(dtype)
    return AwqTiles(random_int32(n // 64, k // 16, 32, 4), scales, random_int32(k // GROUP, n // 64, 8),
                    torch.zeros(n // 64, dtype=torch.int32, device="cuda"), GROUP)


def kernel_calls(kernels: list[str], x: torch.Tensor, k: int, n: int, dtype: torch.dtype) -> dict[str, list]:
    """Per kernel: one call per weight copy."""
    from pagoda_quant_awq.dispatch import CUDA_MAX_TOKENS, awq_linear, awq_tiles_linear, cuda_extension, tiles_extension

    copies, calls = copies_for(n * k // 2), {}
    tiles = [tiles_weights(k, n, dtype) for _ in range(copies)] if tiles_extension() is not None else []
    quant = [checkpoint_weights(k, n) for _ in range(copies)]
    for kernel in kernels:
        if kernel.startswith("tiles") and tiles:
            calls[kernel] = [lambda t=t, kn=kernel: awq_tiles_linear(x, t, kernel=kn) for t in tiles]
        elif kernel in ("triton", "dense") or (kernel == "cuda" and cuda_extension() is not None
                                                and x.shape[0] <= CUDA_MAX_TOKENS):
            calls[kernel] = [lambda q=q, kn=kernel: awq_linear(x, *q, GROUP, kernel=kn) for q in quant]
    return calls


def run(args: argparse.Namespace, report: Report) -> None:
    dtype = getattr(torch, args.dtype)
    kernels = args.kernels.split(",")
    for layer, (k, n) in ({"o": SHAPES["o"]} if args.small else SHAPES).items():
        dense = [torch.randn(n, k, device="cuda", dtype=dtype) * 0.02 for _ in range(copies_for(n * k * 2))]
        awq_bytes = n * k // 2 + (k // GROUP) * n * 2 + (k // GROUP) * n // 2  # int4 + fp16 scales + int4 zeros
        for m in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=dtype)
            us = {"dense_peer": time_each_us([lambda w=w: F.linear(x, w) for w in dense], graphed=True)}
            for kernel, fns in kernel_calls(kernels, x, k, n, dtype).items():
                us[kernel] = time_each_us(fns, graphed=True)
            best = min((name for name in us if name != "dense_peer"), key=us.get)
            report.add(make_row({"layer": layer, "k": k, "n": n, "m": m}, us, peer="dense_peer",
                                floor_us=report.rates.floor_us(nbytes=awq_bytes), best=best))
        del dense
        torch.cuda.empty_cache()
    summarize_layers(report)


def summarize_layers(report: Report) -> None:
    """Per M, a decoder layer's four projections summed: the dense peer against the best kernel."""
    for m, rows in by_m(report.rows).items():
        totals = summed_us(rows)
        dense = totals.pop("dense_peer")
        best = min(totals, key=totals.get)
        report.summarize(f"decoder layer, M={m}: dense {dense:.1f} us, best {best} {totals[best]:.1f} us "
                         f"(x{dense / totals[best]:.2f})", m=m, dense_us=dense, best=best, best_us=totals[best])
