"""Both ranks' decode kernels at TP=2 (issue 15), traced by ``LLM.start_profile()`` on every rank.

Per rank: the kernel table of trace_kernels.py, and how long each fused LL sum-and-norm ends after the
GEMV before it (grouped by that GEMV's grid: the o and down projections). A sum can only end once the
later rank's partial sums arrive, so the rank that waits longer is the one ahead: session 26 found the
sum 5-6 us after its GEMV on rank 0 even with nothing left to push (docs/distributed.md).

    python3 scripts/device/rank_waits.py benchmarks/configs/llama-3.1-8b --out $OUT/r [-tp 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections import defaultdict
from pathlib import Path

from pagoda import LLM, SamplingParams
from pagoda.bench.common import random_prompts
from pagoda.engine.torch_profiler import ENV
from trace_kernels import LAYER_GEMVS, device_events, gemv_grid, table  # scripts/device: this script's own folder

SUM_KERNEL = "ll_all_reduce_add_rms_norm"


def sum_waits(events: list[dict]) -> dict[int, list[float]]:
    """Exclusive time (us) of each fused LL sum, by the grid of the dense GEMV just before it."""
    waits: dict[int, list[float]] = defaultdict(list)
    grid = None
    for e in events:
        if (gemv := gemv_grid(e)) is not None:
            grid = gemv
        elif SUM_KERNEL in e["name"] and grid is not None:
            waits[grid].append(e["exclusive"])
    return waits


def report(trace: Path, steps: int) -> str:
    events = device_events(str(trace))
    if not events:
        return f"{trace.name}: no device kernels"
    lines = [trace.name, table(events, list(LAYER_GEMVS), steps)]
    for grid, waits in sorted(sum_waits(events).items()):
        lines.append(f"sums after the GEMV of grid {grid}: {len(waits)}, mean {statistics.mean(waits):.2f} us, "
                     f"median {statistics.median(waits):.2f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("-tp", "--tensor-parallel-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=32, help="decode steps traced (batch 1)")
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--backend", default="triton")
    p.add_argument("--load-format", default="dummy")
    p.add_argument("--max-model-len", type=int, default=2048)
    args = p.parse_args()
    traces = args.out / "rank_traces"
    os.environ[ENV] = str(traces)
    llm = LLM(model=args.model, load_format=args.load_format, attention_backend=args.backend,
              max_model_len=args.max_model_len, skip_tokenizer_init=True,
              tensor_parallel_size=args.tensor_parallel_size)
    prompts = random_prompts(1, args.input_len, llm.engine.core.parts.hf_config.vocab_size, 0)
    params = SamplingParams(temperature=0, max_tokens=args.steps + 1, ignore_eos=True)
    llm.generate(prompts, params, use_tqdm=False)  # warm: the same shapes as the traced run
    llm.start_profile()
    llm.generate(prompts, params, use_tqdm=False)
    llm.stop_profile()
    llm.shutdown()
    for trace in sorted(traces.glob("rank*.pt.trace.json.gz")):
        print(report(trace, args.steps), flush=True)


if __name__ == "__main__":
    main()
