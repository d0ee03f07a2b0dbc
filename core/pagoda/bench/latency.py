"""`pagoda bench latency`: decode step time at several batch sizes against the memory floor.

A decode step must read every weight once (input embedding tables excepted: a step gathers
only its tokens' rows) plus each sequence's KV cache; the floor is those
bytes over the measured device copy bandwidth (bytes read + written per second: the memory
traffic the device sustains, which a read-only stream can use whole). The step time is measured as (time for output_len tokens - time for 1 token) / (output_len - 1).
"""

from __future__ import annotations

import argparse
import sys
import time

from pagoda import envs
from pagoda.bench.common import (add_common_args, build_llm, device_rates, emit, folder_variable, kv_bytes_per_token,
                                 random_prompts, spec_decode_summary, streamed_weights, synchronize)
from pagoda.bench.step_floor import StepCosts, step_costs
from pagoda.bench.trace_kernels import step_kernels


def add_parser(subparsers, parent: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser("latency", parents=[parent], help="decode step time vs the memory-bandwidth floor",
                              description=__doc__.splitlines()[0])
    p.add_argument("--batch-sizes", default="1,8,64", help="comma-separated decode batch sizes")
    p.add_argument("--input-len", type=int, default=128, help="prompt tokens per request (random ids)")
    p.add_argument("--output-len", type=int, default=64, help="new tokens per request")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per batch size (the fastest of each length counts)")
    p.add_argument("--profile", action="store_true",
                   help="after timing each batch size, run it once more under the torch profiler on every "
                        "tensor-parallel rank (LLM.start_profile); the traces go to the folder that "
                        "PAGODA_TORCH_PROFILER_DIR names, which must be set")
    p.add_argument("--kernels", action="store_true",
                   help="also report each batch size's decode step and its prompts' prefill by kernel: microseconds "
                        "by name, the most time first (with the prefill's floor), from torch profiler traces "
                        "(PAGODA_TORCH_PROFILER_DIR, a temporary folder where unset; each trace is deleted once read)")
    add_common_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.profile and not envs.TORCH_PROFILER_DIR.get():
        print(f"error: --profile needs {envs.TORCH_PROFILER_DIR.name} set to the folder the traces go to",
              file=sys.stderr)
        return 2
    with folder_variable(envs.TORCH_PROFILER_DIR, args.kernels, "pagoda_kernels_"):  # --kernels' traces
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    llm = build_llm(args)
    parts = llm.engine.core.parts
    device = parts.platform.device()
    stages = parts.pp.size  # pipeline stages run a step one after another, each streaming its share (rank 0's here)
    weight_bytes, _ = streamed_weights(parts.model)
    weight_bytes, kv_per_token = weight_bytes * stages, kv_bytes_per_token(parts) * stages
    rates = device_rates(device, parts.dtype)
    read_bandwidth = rates["copy_bytes"]
    rows = []
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        prompts = random_prompts(batch, args.input_len, parts.hf_config.vocab_size, args.seed)
        stats_before = llm.engine.stats
        step = _decode_step_seconds(llm, prompts, args.output_len, args.repeats, device)
        if args.profile:
            _profiled_run(llm, prompts, args.output_len)
        context = args.input_len + args.output_len / 2
        floor = (weight_bytes + batch * context * kv_per_token) / read_bandwidth
        rows.append({"batch": batch, "step_ms": step * 1e3, "floor_ms": floor * 1e3, "ratio_to_floor": step / floor})
        if args.kernels:
            rows[-1].update(_kernels(llm, prompts, args.output_len - 1, step_costs(parts, rates)))
        speculative = spec_decode_summary(llm, stats_before)
        if speculative is not None:  # step_ms is then the time per output token
            rows[-1]["speculative"] = speculative
    emit({"platform": parts.platform.describe(), "weight_bytes": weight_bytes,
          "read_gbps": read_bandwidth / 1e9, "steps": rows}, args.result_file)
    return 0


def _kernels(llm, prompts: list[list[int]], steps: int, costs: StepCosts) -> dict:
    """--kernels: the decode step's kernels and the prefill's, with the prefill's floor (its compute at the measured
    matmul rate, or its reads at the copy rate, whichever is longer; one step where the prompts fit a step)."""
    kernels = step_kernels(llm, prompts, steps)
    tokens, batch = sum(len(p) for p in prompts), len(prompts)
    pairs = sum(len(p) * (len(p) + 1) // 2 for p in prompts)  # causal: each query sees the keys up to its own
    floor = costs.floor_s({"tokens": tokens, "seqs": batch, "pairs": pairs, "kv": tokens})
    return {"kernels_us": kernels["decode"], "prefill_kernels_us": kernels["prefill"],
            "prefill_floor_ms": round(floor * 1e3, 3)}


def _profiled_run(llm, prompts, output_len: int) -> None:
    """One more run of the batch, traced on every rank (the timed runs above are not)."""
    from pagoda import SamplingParams

    llm.start_profile()
    try:
        llm.generate(prompts, SamplingParams(temperature=0, max_tokens=output_len, ignore_eos=True), use_tqdm=False)
    finally:
        llm.stop_profile()


def _decode_step_seconds(llm, prompts, output_len: int, repeats: int, device) -> float:
    from pagoda import SamplingParams

    def timed(n: int) -> float:
        params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
        llm.engine.core.kv_cache.reset_prefix_cache()  # both timings pay the same prefill
        synchronize(device)
        start = time.perf_counter()
        llm.generate(prompts, params, use_tqdm=False)
        synchronize(device)
        return time.perf_counter() - start

    timed(2)  # warm-up
    # Noise only adds time: the fastest of each length is the truest, and their difference is the
    # steps' (the fastest difference would pick the run whose one-token timing was slowed most).
    runs = [(timed(output_len), timed(1)) for _ in range(repeats)]
    return (min(n for n, _ in runs) - min(one for _, one in runs)) / (output_len - 1)
