"""One tiles-kernel call per Llama-3.1-8B projection at M tokens, for Nsight Compute:

    ncu --clock-control none -k regex:awq_tiles_gemm --launch-skip 4 --launch-count 4 \
        --section WarpStateStats --section SourceCounters python3 scripts/device/awq_profile.py 1

Runs each shape twice (the first launch of each warms up), weights far larger than L2 apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from quant_awq import SHAPES, tiles_weights  # noqa: E402

from pagoda_quant_awq.dispatch import awq_tiles_linear  # noqa: E402


def main() -> None:
    m = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    for name in ("gate_up", "down", "qkv", "o"):
        k, n = SHAPES[name]
        weights = tiles_weights(k, n, 2)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for w in weights:
            awq_tiles_linear(x, w, kernel="tiles")
        torch.cuda.synchronize()
        print(name, "done", flush=True)


if __name__ == "__main__":
    main()
