"""GPU diagnosis of the tiles kernel's K split: which warp slices, columns and rows come out wrong.

For one projection, per dtype, token count and forced split: the locks before and after, NaN
poisoning of the output's memory (unwritten cells stay NaN), x = 0 (the output must be exactly 0),
and x nonzero in one warp slice at a time (the output must equal that slice's product alone): for
each slice, the ratio <got, want> / <want, want> and the relative error, then the error per strip
and per column within a strip for the full x.
    python3 scripts/device/awq_split_diag.py [--shape o] [--m 1,40] [--splits 1,2,4]
"""

from __future__ import annotations

import argparse

import torch

from pagoda_quant_awq.dispatch import awq_tiles_linear, tiles_extension
from pagoda_quant_awq.tiles import dequantize_tiles, repack

SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate_up": (4096, 28672), "down": (14336, 4096)}


def slices(k: int, group: int, split: int, wk: int) -> list[tuple[int, int]]:
    """[begin, end) in inputs of each warp slice q = split * WK + wk (the kernel's slice_of)."""
    groups, n = k // group, split * wk
    return [(q * groups // n * group, (q + 1) * groups // n * group) for q in range(n)]


def random_tiles(k: int, n: int, dtype: torch.dtype, g: torch.Generator):
    """Random AutoAWQ tensors (group 128, scales 0.001-0.021) repacked for the tiles kernel."""
    qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, device="cuda", generator=g)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // 128, n // 8), dtype=torch.int32, device="cuda", generator=g)
    scales = (torch.rand(k // 128, n, device="cuda", generator=g) * 0.02 + 0.001).half()
    return repack(qweight, qzeros, scales, 128, dtype)


def call(x: torch.Tensor, tiles, split: int) -> torch.Tensor:
    poison = torch.full((x.shape[0], tiles.weights.shape[0] * 64), float("nan"), device="cuda", dtype=x.dtype)
    del poison  # the caching allocator hands this block to the kernel's output
    return awq_tiles_linear(x, tiles, kernel="tiles", split_k=split)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def diagnose(shape: str, m: int, dtype: torch.dtype, split: int) -> None:
    k, n = SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(7)
    tiles = random_tiles(k, n, dtype, g)
    tt, sp = tiles_extension().awq_tiles_plan(m, n, k, 128, split, 0)
    wk = 4 if tt <= 2 else 2
    w64 = dequantize_tiles(tiles, torch.float64)
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    print(f"\n== {shape} m={m} {dtype} forced split {split}: plan token_tiles={tt} split={sp} (WK={wk})")
    locks0 = int(tiles.locks.abs().sum())
    got = call(x, tiles, split).double()
    want = x.double() @ w64
    print(f"full x: rel err {rel(got, want):.3e}, NaN cells {int(got.isnan().sum())}, "
          f"locks before {locks0} after {tiles.locks.tolist()[:8]}...")
    zero = call(torch.zeros_like(x), tiles, split).double()
    print(f"x = 0: max |out| {zero.abs().max().item():.3e}, NaN {int(zero.isnan().sum())}")
    for q, (b, e) in enumerate(slices(k, 128, sp, wk)):
        if b == e:
            continue
        xs = torch.zeros_like(x)
        xs[:, b:e] = x[:, b:e]
        out = call(xs, tiles, split).double()
        ref = xs.double() @ w64
        ratio = ((out * ref).sum() / (ref * ref).sum()).item()
        print(f"  slice {q:3d} (split {q // wk}, wk {q % wk}) inputs [{b:5d}, {e:5d}): ratio {ratio:+.4f} "
              f"rel err {rel(out, ref):.3e}")
    err = (got - want).abs()
    scale = want.abs().max()
    per_strip = (err.amax(0).reshape(-1, 64).amax(1) / scale).tolist()
    per_col = (err.amax(0).reshape(-1, 64).amax(0) / scale).tolist()
    per_row = (err.amax(1) / scale).tolist()
    print("  err per strip (first 16):", " ".join(f"{v:.2f}" for v in per_strip[:16]))
    print("  err per column in strip:", " ".join(f"{v:.2f}" for v in per_col))
    print("  err per row (first 16):", " ".join(f"{v:.2f}" for v in per_row[:16]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="o")
    ap.add_argument("--m", default="1,40")
    ap.add_argument("--splits", default="1,2,4")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    args = ap.parse_args()
    for dtype in args.dtypes.split(","):
        for m in map(int, args.m.split(",")):
            for split in map(int, args.splits.split(",")):
                diagnose(args.shape, m, getattr(torch, dtype), split)


if __name__ == "__main__":
    main()
