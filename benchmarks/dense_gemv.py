"""Benchmark the csrc dense GEMV against cuBLAS (``F.linear``) at Llama-3.1-8B and Llama-3.2-1B shapes (GPU).

For each projection (fused qkv, o, fused gate/up, down, and the 1B model's LM head; the 8B's also as one rank
of TP=2 holds them) and 1-4 tokens:
microseconds per call of ``F.linear`` and of the GEMV, timed as CUDA-graph replays over enough weight
copies that they stream from memory, and each one's bandwidth against the measured copy bandwidth.
The GEMV is timed with its own choice of split-K and with each split forced (1, 2 or 4 warps a row,
the binding's ``split``), so one run shows which split each shape wants; the layer sums add the best
split of each projection too. Replayed back to back, the GEMV (a programmatic dependent) overlaps the
call before it; run with ``PAGODA_PDL=0`` for calls that do not. Writes JSON (``--out``).

    python benchmarks/dense_gemv.py --out $OUT/dense_gemv.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
import triton

SHAPES = {  # name: (n, k) of weight [n, k]
    "8b.qkv": (6144, 4096), "8b.o": (4096, 4096), "8b.gate_up": (28672, 4096), "8b.down": (4096, 14336),
    "8b-tp2.qkv": (3072, 4096), "8b-tp2.o": (4096, 2048), "8b-tp2.gate_up": (14336, 4096), "8b-tp2.down": (4096, 7168),
    "1b.qkv": (3072, 2048), "1b.o": (2048, 2048), "1b.gate_up": (16384, 2048), "1b.down": (2048, 8192),
    "1b.lm_head": (128256, 2048),
}
STREAM_BYTES = 512 << 20  # weights touched per timed call: well past the 50 MB L2
SPLITS = (1, 2, 4)  # warps sharing a row's k (the GEMV's split-K), each timed


def graphed_us(fns) -> float:
    """Median microseconds of one call, replaying a CUDA graph that runs every fn of ``fns`` once."""
    return 1e3 * triton.testing.do_bench_cudagraph(lambda: [fn() for fn in fns], rep=20, return_mode="median") / len(fns)


def copy_gbs() -> float:
    src = torch.empty(STREAM_BYTES // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    us = graphed_us([lambda: dst.copy_(src)])
    return 2 * src.numel() * 2 / us / 1e3


def time_shape(kernels, x: torch.Tensor, weights: list[torch.Tensor], copy: float) -> dict:
    """cuBLAS, the GEMV (its own split) and the GEMV at each forced split on x and every weight copy."""
    cublas = graphed_us([lambda w=w: F.linear(x, w) for w in weights])
    gemv = graphed_us([lambda w=w: kernels.dense_gemv(x, w, None) for w in weights])
    split_us = {s: graphed_us([lambda w=w, s=s: kernels.dense_gemv(x, w, None, s) for w in weights]) for s in SPLITS}
    best = min(split_us, key=split_us.get)
    copy_us = weights[0].numel() * 2 / copy / 1e3  # one weight copy streamed at the copy bandwidth
    return {"cublas_us": cublas, "gemv_us": gemv, "speedup": cublas / gemv, "gemv_of_copy": copy_us / gemv,
            "cublas_of_copy": copy_us / cublas, "split_us": split_us, "best_split": best,
            "best_split_of_copy": copy_us / split_us[best]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--tokens", default="1,2,4", help="comma-separated token counts (1-4)")
    args = parser.parse_args()
    from pagoda_platform_cuda.build import load_extension

    kernels = load_extension()
    copy = copy_gbs()
    print(f"copy bandwidth {copy:.0f} GB/s")
    rows = []
    for name, (n, k) in SHAPES.items():
        copies = max(2, -(-STREAM_BYTES // (n * k * 2)))
        weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
        for m in (int(t) for t in args.tokens.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            row = time_shape(kernels, x, weights, copy)
            rows.append({"layer": name, "n": n, "k": k, "m": m, **row})
            splits = " ".join(f"{s}: {row['split_us'][s]:6.1f}" for s in SPLITS)
            print(f"{name:14s} M={m} cuBLAS {row['cublas_us']:7.1f} us ({row['cublas_of_copy']:.0%}) | GEMV "
                  f"{row['gemv_us']:7.1f} us ({row['gemv_of_copy']:.0%}) | x{row['speedup']:.2f} | split {splits} us, "
                  f"best {row['best_split']} ({row['best_split_of_copy']:.0%})", flush=True)
        del weights
        torch.cuda.empty_cache()
    for model in ("8b", "8b-tp2", "1b"):
        for m in sorted({r["m"] for r in rows}):
            sel = [r for r in rows if r["layer"].startswith(model + ".") and r["m"] == m and "lm_head" not in r["layer"]]
            cublas, gemv = sum(r["cublas_us"] for r in sel), sum(r["gemv_us"] for r in sel)
            best = sum(r["split_us"][r["best_split"]] for r in sel)
            print(f"{model} decoder layer M={m}: cuBLAS {cublas:.1f} us, GEMV {gemv:.1f} us, x{cublas / gemv:.2f} "
                  f"(best split of each projection: {best:.1f} us, x{cublas / best:.2f})")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "copy_gbs": copy, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
