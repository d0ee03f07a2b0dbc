"""GPU probe of the tiles kernel's K split with one-hot inputs: x = e_k (one token) gives row k of
the weights the kernel uses; each wrong cell is matched against the weights of nearby rows/columns."""
from __future__ import annotations

import sys

import torch

from pagoda_quant_awq.dispatch import awq_tiles_linear
from pagoda_quant_awq.tiles import dequantize_tiles

from awq_split_diag import random_tiles  # scripts/device/ is on sys.path when run as a script

k, n = 4096, 4096
for dtype in (torch.float16, torch.bfloat16):
    tiles = random_tiles(k, n, dtype, torch.Generator(device="cuda").manual_seed(7))
    w = dequantize_tiles(tiles, torch.float64)  # [k, n]
    for split in (1, 2):
        bad_rows = []
        for kk in list(range(0, 40)) + [127, 128, 511, 512, 513, 1024, 2047, 2048, 4095]:
            x = torch.zeros(1, k, device="cuda", dtype=dtype)
            x[0, kk] = 1
            out = awq_tiles_linear(x, tiles, kernel="tiles", split_k=split).double()[0]
            want = w[kk]
            wrong = ((out - want).abs() > want.abs() * 0.01 + 1e-4).nonzero().flatten()
            if len(wrong) == 0:
                continue
            bad_rows.append(kk)
            c = wrong[:4].tolist()
            hints = []
            for col in c:
                v = out[col].item()
                near_k = [(kk2) for kk2 in range(max(0, kk - 64), min(k, kk + 64)) if abs(w[kk2, col].item() - v) < 1e-6]
                near_c = [(c2) for c2 in range(max(0, col - 64), min(n, col + 64)) if abs(w[kk, c2].item() - v) < 1e-6]
                hints.append(f"col {col}: got {v:+.5f} want {want[col].item():+.5f} (= w[k'={near_k[:4]}, col], = w[k, c'={near_c[:4]}])")
            print(f"{dtype} split {split} k={kk}: {len(wrong)} wrong cells; " + "; ".join(hints))
        print(f"{dtype} split {split}: rows with wrong cells: {bad_rows}")
    # all ones
    for split in (1, 2):
        out = awq_tiles_linear(torch.ones(1, k, device="cuda", dtype=dtype), tiles, kernel="tiles", split_k=split).double()[0]
        want = w.sum(0)
        print(f"{dtype} split {split} x=ones: rel err {((out - want).abs().max() / want.abs().max()).item():.3e}")
    sys.stdout.flush()
