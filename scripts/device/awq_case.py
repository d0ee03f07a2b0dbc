"""A small AWQ tiles-GEMM case for compute-sanitizer (memcheck, racecheck): every token-tile count
(1, 2, 4: 5, 16 and 40 tokens), groups 32 and 128, with and without a K split, in bf16 and fp16, on a
layer whose K runs over several x chunks and with a strip past N. Exits non-zero if an output is far
from x @ W with the float64-dequantized weights.

    compute-sanitizer --tool racecheck --kernel-name kns=awq_tiles python3 scripts/device/awq_case.py
"""

from __future__ import annotations

import sys

import torch

from pagoda_quant_awq.dispatch import awq_tiles_linear
from pagoda_quant_awq.tiles import dequantize_tiles, repack

CASES = [(5, 1), (16, 2), (40, 1), (16, 1), (5, 3)]  # (tokens, split)


def main() -> int:
    worst = 0.0
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16):
        for group in (32, 128):
            k, n = 2048, 320  # 64 steps a warp slice unsplit: several chunks; 5 strips: one past N
            qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, generator=gen)
            qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // 8), dtype=torch.int32, generator=gen)
            scales = (torch.rand(k // group, n, generator=gen) * 0.02 + 0.001).half()
            tiles = repack(qweight.cuda(), qzeros.cuda(), scales.cuda(), group, dtype)
            weights = dequantize_tiles(tiles, torch.float64)
            for m, split in CASES:
                x = torch.randn(m, k, generator=gen).to(dtype).cuda()
                got = awq_tiles_linear(x, tiles, kernel="tiles", split_k=split).double()
                ref = x.double() @ weights
                err = ((got - ref).abs().max() / ref.abs().max()).item()
                worst = max(worst, err)
                print(f"{dtype} group {group} m {m} split {split}: rel error {err:.2e}")
    torch.cuda.synchronize()
    print(f"worst rel error {worst:.2e}")
    return 0 if worst < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
