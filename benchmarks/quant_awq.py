"""Benchmark AWQ int4 linear layers against the bf16 dense matmul at Llama-3.1-8B shapes (GPU).

For each projection (fused qkv, o, fused gate/up, down) and token count M = 1, 2, 4, 8, 16, 64, 256,
the time of ``x @ W`` with bf16 weights (``F.linear``, cuBLAS) and with AWQ weights (group 128) by
each kernel: on the tiles layout ``tiles`` (tensor cores, csrc ``awq_tiles_gemm``, its own split-K
plan) and ``tiles_dense`` (dequantize W, then cuBLAS); on the checkpoint layout ``cuda`` (csrc GEMV,
M <= 8), ``triton`` (fused dequant + tl.dot), ``dense`` (dequantize W, then cuBLAS). Timed as
CUDA-graph replays (as the engine runs decode steps) over enough copies of the weights that they
stream from memory rather than L2. At M = 1 and 16 the tiles kernel is also timed at forced K
splits (``tiles_splits``: the data for its split heuristic, with the split it chose). Writes JSON
(``--out``) with the speedup of the best kernel over bf16 per shape, the best kernel per M (the
dispatch tables), and the tiles kernel's weight bandwidth.

    python benchmarks/quant_awq.py --out $OUT/quant_awq.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins" / "quant_awq"))
from pagoda_quant_awq.dispatch import (  # noqa: E402
    CUDA_MAX_TOKENS,
    awq_linear,
    awq_tiles_linear,
    cuda_extension,
    tiles_extension,
)
from pagoda_quant_awq.tiles import AwqTiles  # noqa: E402

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}
TOKENS = (1, 2, 4, 8, 16, 64, 256)
SWEEP_TOKENS, SWEEP_SPLITS = (1, 16), (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)
GROUP = 128
STREAM_BYTES = 512 << 20  # weights touched per timed call: well past the 50 MB L2


def graphed_ms(fns) -> float:
    """Median ms of one call, replaying a CUDA graph that runs every fn of ``fns`` once."""
    total = triton.testing.do_bench_cudagraph(lambda: [fn() for fn in fns], rep=20, return_mode="median")
    return total / len(fns)


def copies_for(bytes_each: int) -> int:
    return max(2, -(-STREAM_BYTES // bytes_each))


def awq_weights(k: int, n: int, count: int):
    out = []
    for _ in range(count):
        qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, device="cuda")
        qzeros = torch.randint(-(2**31), 2**31 - 1, (k // GROUP, n // 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand(k // GROUP, n, device="cuda") * 0.02).half()
        out.append((qweight, qzeros, scales))
    return out


def tiles_weights(k: int, n: int, count: int, dtype: torch.dtype = torch.bfloat16) -> list[AwqTiles]:
    """Random weights already in the tiles layout (random bits are as good as repacked ones to time)."""
    out = []
    for _ in range(count):
        weights = torch.randint(-(2**31), 2**31 - 1, (n // 64, k // 16, 32, 4), dtype=torch.int32, device="cuda")
        zeros = torch.randint(-(2**31), 2**31 - 1, (k // GROUP, n // 64, 8), dtype=torch.int32, device="cuda")
        scales = (torch.rand(k // GROUP, n // 64, 8, 8, device="cuda") * 0.02).to(dtype)
        out.append(AwqTiles(weights, scales, zeros, torch.zeros(n // 64, dtype=torch.int32, device="cuda"), GROUP))
    return out


def bench_shape(name: str, k: int, n: int, only: set[str] | None = None, tokens: tuple[int, ...] = TOKENS,
                dtype: torch.dtype = torch.bfloat16) -> list[dict]:
    """Rows per M; ``bf16_us`` is the dense matmul in ``dtype`` (the peer; bf16 unless --dtype float16)."""
    dense = [torch.randn(n, k, device="cuda", dtype=dtype) * 0.02 for _ in range(copies_for(n * k * 2))]
    quant = awq_weights(k, n, copies_for(n * k // 2)) if only is None or only - {"tiles", "tiles_dense"} else []
    tiles = tiles_weights(k, n, copies_for(n * k // 2), dtype) if tiles_extension() is not None else []
    kernels = (["tiles", "tiles_dense"] if tiles else []) + ["triton", "dense"] + (["cuda"] if cuda_extension() is not None else [])
    kernels = [kn for kn in kernels if only is None or kn in only]
    awq_bytes = n * k // 2 + (k // GROUP) * n * 2 + (k // GROUP) * n // 2  # int4 + scales + zeros
    rows = []
    for m in tokens:
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        row = {"layer": name, "k": k, "n": n, "m": m, "bf16_us": 1e3 * graphed_ms([lambda w=w: F.linear(x, w) for w in dense])}
        for kernel in kernels:
            if kernel == "cuda" and m > CUDA_MAX_TOKENS:
                continue
            if kernel.startswith("tiles"):
                fns = [lambda t=t: awq_tiles_linear(x, t, kernel=kernel) for t in tiles]
            else:
                fns = [lambda q=q: awq_linear(x, *q, GROUP, kernel=kernel) for q in quant]
            row[f"{kernel}_us"] = 1e3 * graphed_ms(fns)
        if "tiles" in kernels:
            row["tiles_plan"] = tiles_extension().awq_tiles_plan(m, n, k, GROUP, 0, torch.cuda.current_device())
            row["tiles_weight_gbps"] = awq_bytes / row["tiles_us"] / 1e3
            if m in SWEEP_TOKENS:
                row["tiles_splits"] = {split: 1e3 * graphed_ms([lambda t=t: awq_tiles_linear(x, t, kernel="tiles", split_k=split)
                                                                for t in tiles]) for split in SWEEP_SPLITS}
        best = min((key for key in row if key.endswith("_us") and key != "bf16_us"), key=row.get)
        row["best"], row["speedup"] = best[:-3], row["bf16_us"] / row[best]
        rows.append(row)
        print(f"{name:8s} M={m:4d} bf16 {row['bf16_us']:8.1f} us | " + " | ".join(
            f"{kn} {row[kn + '_us']:8.1f}" for kn in kernels if kn + "_us" in row) + f" | best {row['best']} x{row['speedup']:.2f}"
            + (f" | tiles plan {row['tiles_plan']} {row['tiles_weight_gbps']:.0f} GB/s" if "tiles_plan" in row else "")
            + (" | splits " + " ".join(f"{s}:{us:.1f}" for s, us in row["tiles_splits"].items()) if "tiles_splits" in row else ""),
            flush=True)
    del dense, quant, tiles
    torch.cuda.empty_cache()
    return rows


def per_token_count(rows: list[dict]) -> list[dict]:
    """A whole decoder layer (the four projections) per M: bf16 time / best AWQ time, and the table."""
    out = []
    for m in sorted({r["m"] for r in rows}):
        sel = [r for r in rows if r["m"] == m]
        kernels = [k[:-3] for k in sel[0] if k.endswith("_us") and k != "bf16_us"]
        totals = {kn: sum(r[kn + "_us"] for r in sel) for kn in kernels}
        best = min(totals, key=totals.get)
        bf16 = sum(r["bf16_us"] for r in sel)
        out.append({"m": m, "bf16_us": bf16, **{f"{k}_us": v for k, v in totals.items()}, "best": best,
                    "speedup_best": bf16 / totals[best]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--kernels", help="comma-separated AWQ kernels to time (default: all)")
    parser.add_argument("--tokens", help="comma-separated token counts M (default: %s)" % ",".join(map(str, TOKENS)))
    parser.add_argument("--dtype", choices=("bfloat16", "float16"), default="bfloat16",
                        help="activation dtype of the AWQ kernels and of the dense peer (AutoAWQ checkpoints are fp16)")
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    only = set(args.kernels.split(",")) if args.kernels else None
    tokens = tuple(int(m) for m in args.tokens.split(",")) if args.tokens else TOKENS
    rows: list[dict] = []
    for name, (k, n) in SHAPES.items():
        rows += bench_shape(name, k, n, only, tokens, dtype)
        write(args.out, {"device": torch.cuda.get_device_name(), "group_size": GROUP, "dtype": args.dtype, "shapes": rows})  # partial
    layer = per_token_count(rows)
    result = {"device": torch.cuda.get_device_name(), "group_size": GROUP, "dtype": args.dtype, "shapes": rows,
              "decoder_layer": layer}
    print("\nM     bf16 layer us   best kernel   speedup")
    for r in layer:
        print(f"{r['m']:<5d} {r['bf16_us']:13.1f}   {r['best']:11s}   x{r['speedup_best']:.2f}")
    write(args.out, result)


def write(path: str | None, result: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
