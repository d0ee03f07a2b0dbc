"""Time ``pagoda.layers.argmax.argmax`` against ``torch.argmax`` over a 128256-entry vocabulary (GPU).

Rows 1-256 of float32 logits, each call timed as CUDA-graph replays; prints microseconds per call
and writes JSON (``--out``). The split pays where torch reduces each row in one thread block.

    python benchmarks/argmax.py --out $OUT/argmax.json
"""

from __future__ import annotations

import argparse
import json

import torch
import triton

from pagoda.layers.argmax import argmax


def graphed_us(fn) -> float:
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    rows = []
    for n in (1, 2, 4, 8, 16, 32, 64, 256):
        x = torch.randn(n, args.vocab, device="cuda")
        assert torch.equal(argmax(x), torch.argmax(x, dim=-1))
        torch_us, split_us = graphed_us(lambda: torch.argmax(x, dim=-1)), graphed_us(lambda: argmax(x))
        rows.append({"rows": n, "vocab": args.vocab, "torch_us": torch_us, "pagoda_us": split_us})
        print(f"rows {n:4d}: torch.argmax {torch_us:6.1f} us | pagoda argmax {split_us:6.1f} us | x{torch_us / split_us:.2f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
