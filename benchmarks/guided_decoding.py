"""Guided (JSON schema) vs unguided decoding throughput, measured in one process, runs alternating.

Both modes sample at temperature 1 and generate exactly ``--output-len`` tokens per request: the
schema (an array of at least 1000 product objects: integers, bounded numbers, strings, booleans,
enums, a nested array) cannot be completed sooner, so no guided sequence ends early and the two
modes do the same model work; the difference is the grammar's cost (bitmask filled on the CPU,
on a worker thread while the host prepares the next step, masked on the device).

CPU (the embedded SmolLM2-135M):
    python benchmarks/guided_decoding.py --batch-size 16 --output-len 64
GPU (dummy Llama-3.1-8B weights with Llama 3's real 128k tokenizer; the device suite ``e2e`` runs it):
    python benchmarks/guided_decoding.py benchmarks/configs/llama-3.1-8b --load-format dummy \\
        --tokenizer /tmp/llama3-tokenizer --batch-size 64 --output-len 256
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from pagoda.bench.common import add_common_args, emit, synchronize
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


def measure(llm, prompts: list[str], modes: dict, repeats: int, output_len: int) -> tuple[dict, dict]:
    """Tokens per second of wall time and of this process's CPU time, per mode, over ``repeats`` alternating runs."""
    rates: dict[str, list[float]] = {name: [] for name in modes}
    per_cpu_s: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(repeats):
        for name, params in modes.items():
            seconds, cpu_seconds, tokens = timed(llm, prompts, params)
            assert tokens == len(prompts) * output_len, (name, tokens)  # no sequence ended early
            rates[name].append(tokens / seconds)
            per_cpu_s[name].append(tokens / cpu_seconds)
    return rates, per_cpu_s


def summary(args: argparse.Namespace, llm, warmup_s: float, rates: dict, per_cpu_s: dict) -> dict:
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
    result["ratio_guided_over_unguided"] = round(result["guided_json_tokens_per_s"] / result["unguided_tokens_per_s"], 3)
    result["ratio_best_runs"] = round(max(rates["guided_json"]) / max(rates["unguided"]), 3)
    result["ratio_per_cpu_s"] = round(result["guided_json_tokens_per_cpu_s"] / result["unguided_tokens_per_cpu_s"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=16, help="requests, all running at once")
    parser.add_argument("--output-len", type=int, default=64, help="new tokens per request (both modes)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per mode, alternating")
    add_common_args(parser)
    args = parser.parse_args()
    from pagoda import LLM, SamplingParams
    from pagoda.sampling_params import GuidedDecodingParams

    config = engine_config(args, args.model)
    config.max_num_seqs = max(config.max_num_seqs, args.batch_size)
    llm = LLM(**vars(config))
    prompts = make_prompts(args.batch_size)
    common = dict(temperature=1.0, seed=0, max_tokens=args.output_len, ignore_eos=True)
    modes = {"unguided": SamplingParams(**common),
             "guided_json": SamplingParams(**common, guided_decoding=GuidedDecodingParams(json=SCHEMA))}
    start = time.perf_counter()
    for params in modes.values():  # warm-up: the grammar compiles, kernels and graphs are ready
        timed(llm, prompts, SamplingParams(**{**common, "max_tokens": 8}, guided_decoding=params.guided_decoding))
    warmup_s = time.perf_counter() - start
    rates, per_cpu_s = measure(llm, prompts, modes, args.repeats, args.output_len)
    emit(summary(args, llm, warmup_s, rates, per_cpu_s), args.result_file)


if __name__ == "__main__":
    main()
