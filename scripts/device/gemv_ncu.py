"""Launches the dense GEMV at one token for a few Llama-3.1-8B shapes (whole and a TP=2 rank's), one and two
rows a warp, for Nsight Compute to read each launch's counters (scripts/device/gemv_ncu.sh). Prints the
launch order as "launch INDEX: SHAPE rows R" lines, which the summary matches to ncu's "ID" column.

    python3 scripts/device/gemv_ncu.py
"""

from __future__ import annotations

import torch

SHAPES = {  # name: (n, k) of weight [n, k]
    "8b.qkv": (6144, 4096), "8b.o": (4096, 4096), "8b-tp2.qkv": (3072, 4096), "8b-tp2.o": (4096, 2048),
    "8b-tp2.gate_up": (14336, 4096), "8b-tp2.down": (4096, 7168),
}
REPEATS = 2  # launches of each configuration (ncu flushes the caches before each by default)


def main() -> None:
    from pagoda_platform_cuda.build import load_extension

    kernels = load_extension()
    index = 0
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        for rows in (1, 2):
            for _ in range(REPEATS):
                kernels.dense_gemv(x, w, None, 0, rows)
                print(f"launch {index}: {name} rows {rows}", flush=True)
                index += 1
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
