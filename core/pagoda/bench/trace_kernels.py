"""Where a run's time goes, from the torch profiler: the total time of each kernel (or host op) by name over
one traced run of an offline :class:`~pagoda.LLM` (``LLM.start_profile``), read back from rank 0's trace.

A benchmark that subtracts two traced runs (``n`` new tokens and 1) gets each decode step's kernels without
the prefill's, and the run of 1 token gives the prefill's (``step_kernels``). ``benchmarks/lora_throughput.py
--profile-kernels`` records them beside its timings, so that a slow step names its kernels in the same result file.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Callable

from pagoda.runner.torch_profiler import profiler_dir

TRACE_GLOB = "rank0.*.pt.trace.json.gz"


def traced_times_us(llm, run: Callable[[], object], category: str) -> Counter:
    """Microseconds by event name of the trace events of ``category`` (``kernel``: GPU kernels; ``cpu_op``: host
    ops, which nest: an op's time includes the ops it calls) while ``run()`` runs under the profiler. Needs
    ``PAGODA_TORCH_PROFILER_DIR``."""
    directory = Path(profiler_dir())
    before = set(directory.glob(TRACE_GLOB))
    llm.start_profile()
    try:
        run()
    finally:
        llm.stop_profile()
    (trace,) = set(directory.glob(TRACE_GLOB)) - before
    with gzip.open(trace, "rt") as f:
        events = json.load(f)["traceEvents"]
    trace.unlink()  # large; the summary is what is kept
    times: Counter = Counter()
    for event in events:
        if event.get("cat") == category and event.get("ph") == "X":
            times[event["name"]] += event.get("dur", 0)
    return times


def per_step(long_run: Counter, short_run: Counter, steps: int, top: int = 16) -> dict[str, float]:
    """(long_run - short_run) / steps for the ``top`` names of most time, and the total of all names."""
    diff = {name: (long_run[name] - short_run.get(name, 0)) / steps for name in long_run}
    kept = sorted(diff.items(), key=lambda item: -item[1])[:top]
    return {"total_us": round(sum(diff.values()), 1), **{name[:100]: round(us, 1) for name, us in kept}}


def step_kernels(llm, prompts: list[list[int]], steps: int = 32, lora=None) -> dict[str, dict[str, float]]:
    """The device kernels (host ops on a CPU), microseconds by name, of ``prompts`` (a batch): ``decode``, one decode
    step, from traces of ``steps + 1`` new tokens and of 1, each the quicker of two (a busy host only adds time, and
    a slow short run would take its excess from the steps); ``prefill``, the run of 1 token: the prompts' prefill
    (one step where the batch's prompt tokens fit a step) and its sample."""
    from pagoda import SamplingParams

    category = "cpu_op" if llm.engine.core.parts.platform.device_type == "cpu" else "kernel"

    def traced(tokens: int) -> Counter:
        params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        llm.engine.core.reset_prefix_cache()  # both runs compute the same prefill, which the difference cancels
        return traced_times_us(llm, lambda: llm.generate(prompts, params, use_tqdm=False, lora_request=lora), category)

    def quicker(tokens: int) -> Counter:
        return min((traced(tokens) for _ in range(2)), key=lambda times: sum(times.values()))

    one = quicker(1)
    return {"decode": per_step(quicker(steps + 1), one, steps), "prefill": per_step(one, Counter(), 1)}
