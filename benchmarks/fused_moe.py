"""The fused MoE Triton kernel against the torch reference (one cuBLAS matmul pair per expert) at
Mixtral-8x7B's shapes (hidden 4096, inter 14336, 8 experts, top 2), for M tokens.

    python benchmarks/fused_moe.py --out moe.json                # GPU
    python benchmarks/fused_moe.py --tokens 1,4 --small          # a CPU smoke run (TRITON_INTERPRET=1)

Both are timed with CUDA events (median of the repeats, after warm-up); the reference cannot be
captured in a CUDA graph (it syncs to find the experts in use), so neither is. Also reported: the
weight bytes the kernel must read (experts hit x their 3 matrices) as GB/s, and the TFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from pagoda.layers.moe import select_experts
from pagoda.layers.ops import CustomOps


def _time_ms(fn, repeats: int, device: str) -> float:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def run(tokens: list[int], hidden: int, inter: int, experts: int, top_k: int, repeats: int) -> list[dict]:
    from pagoda.layers.fused_moe_triton import fused_moe_triton, tile_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    ops = CustomOps()
    w13 = torch.randn(experts, 2 * inter, hidden, device=device, dtype=dtype) * hidden**-0.5
    w2 = torch.randn(experts, hidden, inter, device=device, dtype=dtype) * inter**-0.5
    rows = []
    for m in tokens:
        x = torch.randn(m, hidden, device=device, dtype=dtype)
        weights, ids = select_experts(torch.randn(m, experts, device=device), top_k, renormalize=True)
        ref = ops.fused_moe(x, w13, w2, weights, ids)
        got = fused_moe_triton(x, w13, w2, weights, ids, ops.silu_and_mul)
        err = ((got.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        fused_ms = _time_ms(lambda: fused_moe_triton(x, w13, w2, weights, ids, ops.silu_and_mul), repeats, device)
        ref_ms = _time_ms(lambda: ops.fused_moe(x, w13, w2, weights, ids), repeats, device)
        hit = ids.unique().numel()
        weight_bytes = hit * 3 * inter * hidden * w13.element_size()
        flops = 2 * m * top_k * 3 * inter * hidden
        rows.append({
            "tokens": m, "experts_hit": hit, "tiles": tile_config(m * top_k / experts)._asdict(),
            "fused_ms": fused_ms, "reference_ms": ref_ms, "speedup": ref_ms / fused_ms, "max_rel_err": err,
            "fused_weight_gbps": weight_bytes / fused_ms / 1e6, "fused_tflops": flops / fused_ms / 1e9,
        })
        print(f"M={m:5d} fused {fused_ms:8.3f} ms  reference {ref_ms:8.3f} ms  {ref_ms / fused_ms:5.2f}x  "
              f"{rows[-1]['fused_weight_gbps']:7.0f} GB/s  {rows[-1]['fused_tflops']:6.1f} TFLOP/s  err {err:.1e}",
              flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", default="1,2,4,8,16,64,256,1024,4096", help="comma-separated token counts M")
    parser.add_argument("--small", action="store_true", help="tiny shapes (hidden 64, inter 128) for a CPU smoke run")
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats per case (median reported)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    hidden, inter = (64, 128) if args.small else (4096, 14336)
    rows = run([int(t) for t in args.tokens.split(",")], hidden, inter, experts=8, top_k=2, repeats=args.repeats)
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    result = {"device": device, "shape": {"hidden": hidden, "inter": inter, "experts": 8, "top_k": 2}, "rows": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
