"""Where a step's host time goes, overlap on and off: schedule, launch, wait for tokens, outputs.

    python3 scripts/device/profile_overlap.py benchmarks/configs/llama-3.1-8b --num-prompts 512

Wraps the engine core's phases with timers (one LLM, the overlap switch flipped between runs)
and prints, per mode: wall time, steps, graph vs eager launches, and the mean host milliseconds
of each phase per step.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

import torch

from pagoda import LLM, SamplingParams
from pagoda.engine import model_runner
from pagoda.engine_core import core as core_module

TIMES: dict[str, float] = collections.defaultdict(float)
COUNTS: dict[str, int] = collections.Counter()


def timed(name: str, fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name] += time.perf_counter() - start
            COUNTS[name] += 1
    return wrapper


def instrument(llm: LLM) -> None:
    core = llm.engine.core
    core.scheduler.schedule = timed("schedule", core.scheduler.schedule)
    core.runner.launch = timed("launch", core.runner.launch)
    core.runner._forward = timed("launch.forward", core.runner._forward)
    core.runner._inputs = timed("launch.inputs", core.runner._inputs)
    core.runner.sampler.sample = timed("launch.sample", core.runner.sampler.sample)
    model_runner.PendingStep.result = timed("wait_tokens", model_runner.PendingStep.result)
    core_module.EngineCore._resolve = timed("resolve", core_module.EngineCore._resolve)
    core.scheduler.update_from_output = timed("update_from_output", core.scheduler.update_from_output)
    llm.engine.outputs.process = timed("front_end_process", llm.engine.outputs.process)
    real_forward, real_schedule = core.runner._forward, core.scheduler.schedule
    last = {"t": None, "kind": None}

    def schedule():  # a step lasts from one schedule() to the next: charge it to its launch's kind
        now = time.perf_counter()
        if last["t"] is not None and last["kind"] is not None:
            TIMES[f"step_{last['kind']}_total"] += now - last["t"]
        last["t"], last["kind"] = now, None
        return real_schedule()

    def forward(inputs):
        last["kind"] = "graph" if inputs.graph_size is not None else "eager"
        COUNTS[f"{last['kind']}_steps"] += 1
        return real_forward(inputs)

    core.scheduler.schedule = schedule
    core.runner._forward = forward


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--num-prompts", type=int, default=512)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--runs", type=int, default=4, help="runs, alternating overlap off and on")
    args = p.parse_args()
    llm = LLM(model=args.model, load_format="dummy", attention_backend="triton", max_model_len=2048,
              skip_tokenizer_init=True)
    instrument(llm)
    g = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 128000, (args.num_prompts, args.input_len), generator=g).tolist()
    params = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    llm.generate(prompts[:16], SamplingParams(max_tokens=4, ignore_eos=True), use_tqdm=False)
    report = {}
    for overlap in (False, True, False, True)[: args.runs]:
        llm.engine.core.overlap = overlap
        TIMES.clear()
        COUNTS.clear()
        torch.cuda.synchronize()
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        steps = COUNTS["schedule"]
        row = {"wall_s": round(wall, 3), "steps": steps, "graph_steps": COUNTS["graph_steps"],
               "eager_steps": COUNTS["eager_steps"]}
        row.update({f"{k}_ms_per_step": round(1e3 * v / max(steps, 1), 3) for k, v in sorted(TIMES.items())
                    if not k.endswith("_total")})
        row.update({f"{k}_s": round(v, 3) for k, v in TIMES.items() if k.endswith("_total")})
        report[f"overlap={overlap}#{len(report)}"] = row
        print(json.dumps({f"overlap={overlap}": row}), flush=True)


if __name__ == "__main__":
    main()
