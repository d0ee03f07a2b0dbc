"""benchmarks/peers/step_sizes.py: each engine's steps over a run from its histogram of tokens a step, in
Pagoda's rendering and in vLLM's (labels around ``le``, float bounds)."""

from __future__ import annotations

import sys
from pathlib import Path

from pagoda.engine_core.core import _count_iteration
from pagoda.messages import StepStats
from pagoda.server.metrics_engine import engine_lines

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "peers"))
import step_sizes  # noqa: E402


def pagoda_metrics(step_tokens: list[int]) -> str:
    stats = StepStats()
    for tokens in step_tokens:
        _count_iteration(stats, tokens)
    return "\n".join(engine_lines("pagoda", 'model_name="m"', {0: stats}))


def vllm_metrics(counts: dict[str, float], total: float) -> str:
    lines = ["# TYPE vllm:iteration_tokens_total histogram"]
    for le, n in counts.items():
        lines.append(f'vllm:iteration_tokens_total_bucket{{engine="0",le="{le}",model_name="m"}} {n}')
    lines += [f'vllm:iteration_tokens_total_count{{engine="0",model_name="m"}} {counts["+Inf"]}',
              f'vllm:iteration_tokens_total_sum{{engine="0",model_name="m"}} {total}']
    return "\n".join(lines)


def test_pagoda_steps_between_two_scrapes():
    before = step_sizes.parse(pagoda_metrics([8192, 256]))
    after = step_sizes.parse(pagoda_metrics([8192, 256, 256, 256, 300, 3000, 9000]))
    run = step_sizes.window(before, after, duration_s=0.05)
    assert (run["steps"], run["tokens"]) == (5, 256 + 256 + 300 + 3000 + 9000)
    assert run["mean_tokens"] == round(run["tokens"] / 5, 1) and run["ms_per_step"] == 10.0
    assert run["buckets"]["<=256"] == 2 and run["buckets"]["<=512"] == 1 and run["buckets"]["<=4096"] == 1
    assert run["buckets"]["<=16384"] == 1 and run["buckets"]["<=8192"] == 0 and sum(run["buckets"].values()) == 5


def test_vllm_rendering_reads_the_same():
    bounds = ["1.0", "8.0", "16.0", "32.0", "64.0", "128.0", "256.0", "512.0", "1024.0", "2048.0", "4096.0",
              "8192.0", "16384.0", "+Inf"]
    before = step_sizes.parse(vllm_metrics(dict.fromkeys(bounds, 0.0), 0.0))
    cumulative = [0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 4, 4, 4]
    after = step_sizes.parse(vllm_metrics(dict(zip(bounds, map(float, cumulative))), 3 * 200 + 8000.0))
    run = step_sizes.window(before, after, duration_s=None)
    assert run["steps"] == 4 and run["buckets"]["<=256"] == 3 and run["buckets"]["<=8192"] == 1
    assert "ms_per_step" not in run


def test_no_histogram_no_window():
    assert step_sizes.window(step_sizes.parse(""), step_sizes.parse("other_metric 1"), 1.0) is None
