"""The fused MoE Triton kernel (``pagoda.layers.fused_moe_triton``) against the torch reference (one
matmul pair per expert, ``CustomOps.fused_moe``) at Mixtral-8x7B's shapes (hidden 4096, inter 14336,
8 experts, top 2), for M tokens. Both are timed launch by launch (the reference syncs to find the
experts in use, so it cannot be captured in a graph). The floor: the weights of the experts hit at
the copy rate, or the FLOPs at the matmul rate. ``max_rel_err``: the kernel against the reference.
``--small`` (hidden 64, inter 128) runs on a CPU under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.kernel_bench.report import Report, make_row
from benchmarks.kernel_bench.timing import device, on_gpu, time_us
from pagoda.triton_support import interpreting

TIMING = "launches (CUDA events), median"
EXPERTS, TOP_K = 8, 2


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", help="comma-separated token counts M (default 1,2,4,8,16,64,256,1024,4096; --small: 1,4)")


def unavailable(args: argparse.Namespace) -> str | None:
    if not on_gpu() and not interpreting():
        return "the Triton kernel needs a GPU, or TRITON_INTERPRET=1 (with --small) on a CPU"
    return None


def run(args: argparse.Namespace, report: Report) -> None:
    from pagoda.layers.fused_moe_triton import fused_moe_triton, tile_config
    from pagoda.layers.moe import select_experts
    from pagoda.interfaces.ops import CustomOps

    hidden, inter = (64, 128) if args.small else (4096, 14336)
    default = "1,4" if args.small else "1,2,4,8,16,64,256,1024,4096"
    dtype, ops = torch.bfloat16 if on_gpu() else torch.float32, CustomOps()
    w13 = torch.randn(EXPERTS, 2 * inter, hidden, device=device(), dtype=dtype) * hidden**-0.5
    w2 = torch.randn(EXPERTS, hidden, inter, device=device(), dtype=dtype) * inter**-0.5
    for m in (int(t) for t in (args.tokens or default).split(",")):
        x = torch.randn(m, hidden, device=device(), dtype=dtype)
        weights, ids = select_experts(torch.randn(m, EXPERTS, device=device()), TOP_K, renormalize=True)
        fused = lambda: fused_moe_triton(x, w13, w2, weights, ids, ops.silu_and_mul)  # noqa: E731
        reference = lambda: ops.fused_moe(x, w13, w2, weights, ids)  # noqa: E731
        want, got = reference().float(), fused().float()
        hit = ids.unique().numel()
        floor = report.rates.floor_us(nbytes=hit * 3 * inter * hidden * w13.element_size(),
                                      flops=2 * m * TOP_K * 3 * inter * hidden)
        report.add(make_row({"tokens": m, "hidden": hidden, "inter": inter}, {"reference": time_us(reference),
                            "fused": time_us(fused)}, peer="reference", floor_us=floor, experts_hit=hit,
                            tiles=tile_config(m * TOP_K / EXPERTS)._asdict(),
                            max_rel_err=float((got - want).abs().max() / want.abs().max())))
