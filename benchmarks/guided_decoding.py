"""Guided (JSON schema) vs unguided decoding throughput, measured in one process, runs alternating.

Both modes sample at temperature 1 and generate exactly ``--output-len`` tokens per request: the
schema (an array of at least 1000 product objects: integers, bounded numbers, strings, booleans,
enums, a nested array) cannot be completed sooner, so no guided sequence ends early and the two
modes do the same model work; the difference is the grammar's cost (bitmask filled on the CPU,
on a worker thread while the host prepares the next step, masked on the device).

CPU (the embedded SmolLM2-135M):
    python benchmarks/guided_decoding.py --batch-size 16 --output-len 64
GPU (dummy Llama-3.1-8B weights, Llama 3's real 128k tokenizer, see scripts/device/guided_bench.sh):
    python benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy \\
        --tokenizer /tmp/llama3-tokenizer --batch-size 64 --output-len 256 --serial --breakdown

``--serial`` adds a mode ``guided_serial``: guided JSON on the path from before the grammar worker
thread (the bitmask filled in the launch by xgrammar's threads); ``--legacy`` a mode
``guided_legacy``: the path from before the bitmask work (benchmarks/guided_step_timing.py); each
for an A/B in the same process.
``--breakdown`` adds one more run per mode with per-step timings (``per_step_ms``: forward and
sampling device time, launch host time, time waiting for tokens, the grammar phases).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from pagoda.bench.common import add_common_args, synchronize
from pagoda.entrypoints.engine_args import engine_config

SCHEMA = {"type": "array", "minItems": 1000, "items": {"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0, "maximum": 99999}, "name": {"type": "string", "maxLength": 24},
    "price": {"type": "number", "minimum": 0, "maximum": 1000}, "in_stock": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["new", "sale", "gift", "bulk"]}, "maxItems": 3}},
    "required": ["id", "name", "price", "in_stock", "tags"]}}
TOPICS = ["garden tools", "kitchen knives", "board games", "running shoes", "desk lamps", "tea sets",
          "camping stoves", "bicycle parts", "notebooks", "phone cases", "wool scarves", "coffee beans"]


def make_prompts(n: int) -> list[str]:
    return [f"List the {TOPICS[i % len(TOPICS)]} in stock (batch {i}) as a JSON array of products:" for i in range(n)]


def timed(llm, prompts: list[str], params) -> tuple[float, float, int]:
    """Wall seconds, this process's CPU seconds (all its threads) and tokens of one batch."""
    device = llm.engine.core.parts.platform.device()
    synchronize(device)
    start, cpu_start = time.perf_counter(), time.process_time()
    outputs = llm.generate(prompts, params, use_tqdm=False)
    synchronize(device)
    return (time.perf_counter() - start, time.process_time() - cpu_start,
            sum(len(c.token_ids) for o in outputs for c in o.outputs))


def mode_context(llm, name: str):
    """The grammar path of a mode: ``guided_serial`` and ``guided_legacy`` switch to the ones before."""
    from guided_step_timing import legacy_guided, serial_guided

    if name == "guided_serial":
        return serial_guided(llm)
    if name == "guided_legacy":
        return legacy_guided(llm)
    return nullcontext()


def breakdown(llm, prompts: list[str], modes: dict) -> dict[str, dict[str, float]]:
    """One run per mode with per-step timings (medians per call, ms; see benchmarks/guided_step_timing.py)."""
    from guided_step_timing import probe_steps

    out: dict[str, dict[str, float]] = {}
    for name, params in modes.items():
        timings: dict[str, float] = {}
        with mode_context(llm, name):
            with probe_steps(llm, timings):
                seconds, _, tokens = timed(llm, prompts, params)
        out[name] = {"wall_per_step": round(1e3 * seconds * len(prompts) / tokens, 3), **timings}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16, help="requests, all running at once")
    parser.add_argument("--output-len", type=int, default=64, help="new tokens per request (both modes)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per mode, alternating")
    parser.add_argument("--serial", action="store_true", help="add mode guided_serial (no grammar worker thread)")
    parser.add_argument("--legacy", action="store_true", help="add mode guided_legacy (before the bitmask work)")
    parser.add_argument("--breakdown", action="store_true", help="one more run per mode, timing each step's parts")
    add_common_args(parser)
    args = parser.parse_args()
    from pagoda import LLM, SamplingParams
    from pagoda.guided.params import GuidedDecodingParams

    config = engine_config(args, args.model)
    config.max_num_seqs = max(config.max_num_seqs, args.batch_size)
    llm = LLM(**vars(config))
    prompts = make_prompts(args.batch_size)
    common = dict(temperature=1.0, seed=0, max_tokens=args.output_len, ignore_eos=True)
    guided = SamplingParams(**common, guided_decoding=GuidedDecodingParams(json=SCHEMA))
    modes = {"unguided": SamplingParams(**common), "guided_json": guided}
    modes.update({f"guided_{name}": guided for name in ("serial", "legacy") if getattr(args, name)})
    start = time.perf_counter()
    for name, params in modes.items():  # warm-up: the grammar compiles, kernels and graphs are ready
        with mode_context(llm, name):
            timed(llm, prompts, SamplingParams(**{**common, "max_tokens": 8}, guided_decoding=params.guided_decoding))
    warmup_s = time.perf_counter() - start
    rates: dict[str, list[float]] = {name: [] for name in modes}
    per_cpu_s: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, params in modes.items():
            with mode_context(llm, name):
                seconds, cpu_seconds, tokens = timed(llm, prompts, params)
            assert tokens == args.batch_size * args.output_len, (name, tokens)  # no sequence ended early
            rates[name].append(tokens / seconds)
            per_cpu_s[name].append(tokens / cpu_seconds)
    result = {
        "workload": f"{args.batch_size} requests x {args.output_len} new tokens at temperature 1, all in one batch",
        "model": args.model or "SmolLM2-135M-Instruct (embedded)", "load_format": args.load_format,
        "platform": llm.engine.core.parts.platform.describe(),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} torch threads",
        "load_average_1m": round(os.getloadavg()[0], 2),  # other work on the machine skews CPU figures
        "vocab_size": llm.engine.info.vocab_size, "warmup_s": round(warmup_s, 2),
        **{f"{name}_tokens_per_s": round(statistics.median(r), 1) for name, r in rates.items()},
        "runs_tokens_per_s": {name: [round(x, 1) for x in r] for name, r in rates.items()},
        # tokens per second of this process's CPU time: the cost, less sensitive to other work on a shared CPU
        **{f"{name}_tokens_per_cpu_s": round(statistics.median(r), 1) for name, r in per_cpu_s.items()},
    }
    for name in ("serial", "legacy"):
        if f"guided_{name}" in modes:
            ratio = result[f"guided_{name}_tokens_per_s"] / result["unguided_tokens_per_s"]
            result[f"ratio_{name}_over_unguided"] = round(ratio, 3)
    if args.breakdown:
        result["per_step_ms"] = breakdown(llm, prompts, modes)
    result["ratio_guided_over_unguided"] = round(result["guided_json_tokens_per_s"] / result["unguided_tokens_per_s"], 3)
    result["ratio_best_runs"] = round(max(rates["guided_json"]) / max(rates["unguided"]), 3)
    result["ratio_per_cpu_s"] = round(result["guided_json_tokens_per_cpu_s"] / result["unguided_tokens_per_cpu_s"], 3)
    text = json.dumps(result, indent=2)
    print(text)
    if args.result_file:
        Path(args.result_file).write_text(text + "\n")


if __name__ == "__main__":
    main()
