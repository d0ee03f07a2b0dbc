"""Time top-k / top-p masking by a threshold (``pagoda.engine.top_p``) against the sort path (GPU).

Batch 1-256 x 128256 float32 logits at top-p 0.9 (and top-k 50 with it): peaked rows, whose nucleus
ends among the 1024 candidates, and flat rows (dummy weights), which the kernel searches whole. Each
call timed as CUDA-graph replays; prints microseconds per call and writes JSON (``--out``).

    python benchmarks/top_p.py --out $OUT/top_p.json
"""

from __future__ import annotations

import argparse
import json

import torch
import triton

from pagoda.engine import top_p
from pagoda.engine.sampler import _apply_top_k_top_p


def graphed_us(fn) -> float:
    return 1e3 * triton.testing.do_bench_cudagraph(fn, rep=20, return_mode="median")


def case(rows: int, vocab: int, scale: float, with_top_k: bool) -> dict:
    x = torch.randn(rows, vocab, device="cuda") * scale
    p = torch.full((rows,), 0.9, device="cuda")
    k = torch.full((rows,), 50 if with_top_k else vocab, device="cuda", dtype=torch.long)
    max_k = 50 if with_top_k else 1
    work = x.clone()
    torch.cuda.synchronize()
    sort_us = graphed_us(lambda: _apply_top_k_top_p(work.copy_(x), k if with_top_k else None, p, max_k))
    threshold_us = graphed_us(lambda: top_p.apply_top_k_top_p(work.copy_(x), k if with_top_k else None, p, max_k))
    row = dict(rows=rows, rows_kind="peaked" if scale > 1 else "flat", top_k=50 if with_top_k else None,
               sort_us=sort_us, threshold_us=threshold_us, speedup=sort_us / threshold_us)
    print(f"{rows:3d} x {vocab} {row['rows_kind']:6s} top-k {str(row['top_k']):4s}: sort {sort_us:8.1f} us  "
          f"threshold {threshold_us:8.1f} us  ({row['speedup']:.2f}x)", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    results = [case(n, args.vocab, scale, k) for n in (1, 32, 256) for scale in (6.0, 0.02) for k in (False, True)]
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "cases": results}, f, indent=1)


if __name__ == "__main__":
    main()
