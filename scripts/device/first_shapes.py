"""Does an eager step pay extra the first time its token count appears? (profile_mixed.py's first mixed
step took 22-53 ms against 10-24 ms for the same step again, H100, 2026-11-23 and -27; served steps have many
token counts, so such costs could be the served ITL/TTFT p99.)

    python3 scripts/device/first_shapes.py benchmarks/configs/llama-3.1-8b --out $OUT/first_shapes.json

One eager forward pass (prefill-shaped dummy metadata, one sequence) per token count, timed with a
synchronise, twice in a row: ``first`` / ``again``. Phases, in one process:
  A. token counts never seen (300..315): the first-time cost;
  B. a coarse warm-up: 16..256 by 16, then by 64 to 2048 tokens (COARSE_GRID);
  C. other unseen counts between them (330..345, 700..715): if their first-time cost is gone, a coarse
     warm-up at start-up is the fix (the cost is per kernel variant: lazy module loading, heuristics
     per shape class); if it stays, the cost is per count and steps must be padded to a few sizes.
  D. plain ``torch.mm`` [T, hidden] x [hidden, hidden] at unseen T (5000..5007): cuBLAS alone.
Run it under CUDA_MODULE_LOADING=EAGER too (a separate process) to see what lazy loading accounts for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from pagoda import LLM
from pagoda.engine.profiling import dummy_forward, dummy_prefill_metadata


# the grid of the start-up warm-up that was measured with this script (PAGODA_SHAPE_WARMUP, removed 2026-11-28)
COARSE_GRID = [*range(16, 257, 16), *range(320, 2049, 64)]


def timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


class Forward:
    def __init__(self, llm: LLM) -> None:
        parts = llm.engine.core.parts
        self.model, self.attention, self.platform = parts.model, parts.attention, parts.platform
        self.kv_caches, self.block_size = parts.kv_caches, parts.config.block_size
        self.hidden = parts.hf_config.hidden_size

    def __call__(self, tokens: int) -> None:
        device = self.platform.device()
        meta = dummy_prefill_metadata(tokens, 1, self.block_size, device)
        with self.platform.inference_context():
            dummy_forward(self.model, self.attention, meta, self.kv_caches, device)


def twice(fn, sizes: list[int]) -> dict:
    rows = [{"tokens": t, "first_ms": round(timed(lambda: fn(t)), 2), "again_ms": round(timed(lambda: fn(t)), 2)}
            for t in sizes]
    extra = [r["first_ms"] - r["again_ms"] for r in rows]
    return {"rows": rows, "median_first_extra_ms": round(statistics.median(extra), 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--backend", default="auto")
    p.add_argument("--scale", type=int, default=1, help="divide every token count by this (CPU checks)")
    args = p.parse_args()
    llm = LLM(model=args.model, load_format="dummy", attention_backend=args.backend, max_model_len=4096,
              skip_tokenizer_init=True)
    forward = Forward(llm)
    s = args.scale
    forward(64 // s)  # the first pass of all (one-off start-up costs) is not a phase
    result = {"A_unseen": twice(forward, [t // s for t in range(300, 316)])}
    start = time.perf_counter()
    for t in COARSE_GRID:
        forward(max(1, t // s))
    result["B_warmup_s"] = round(time.perf_counter() - start, 2)
    result["C_unseen_after_warmup"] = twice(forward, [t // s for t in [*range(330, 346), *range(700, 716)]])
    device, dtype = forward.platform.device(), llm.engine.core.parts.dtype
    weight = torch.randn(forward.hidden, forward.hidden, device=device, dtype=dtype)
    result["D_mm_unseen"] = twice(lambda t: torch.mm(torch.ones(t, forward.hidden, device=device, dtype=dtype), weight),
                                  [t // s for t in range(5000, 5008)])
    text = json.dumps(result, indent=1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(json.dumps({k: (v["median_first_extra_ms"] if isinstance(v, dict) else v) for k, v in result.items()}))


if __name__ == "__main__":
    main()
