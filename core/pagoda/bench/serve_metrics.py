"""The metrics of `pagoda bench serve`, defined as in vLLM's serving benchmark.

TTFT: request sent -> first content chunk. ITL: gap between successive content chunks.
TPOT: (E2E - TTFT) / (output tokens - 1), per request with more than one output token.
E2E: request sent -> stream closed. Throughputs divide totals by the benchmark's wall time.
"""

from __future__ import annotations

import math
from typing import Iterable

from pagoda.bench.serve_requests import RequestResult

PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2el")
LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def describe_ms(values: Iterable[float]) -> dict[str, float]:
    """mean, std, p50/p90/p99 of seconds, in milliseconds."""
    ms = [v * 1000 for v in values]
    mean = sum(ms) / len(ms) if ms else 0.0
    std = math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms)) if ms else 0.0
    stats = {"mean": mean, "std": std}
    stats.update({f"p{q}": percentile(ms, q) for q in PERCENTILES})
    return stats


def tpot(result: RequestResult) -> float | None:
    if result.output_tokens <= 1:
        return None
    return (result.latency - result.ttft) / (result.output_tokens - 1)


def summarize(results: list[RequestResult], duration: float) -> dict:
    """Totals, throughputs and latency statistics (ms) over the successful requests."""
    ok = [r for r in results if r.success]
    input_tokens = sum(r.prompt_len for r in ok)
    output_tokens = sum(r.output_tokens for r in ok)
    samples = {
        "ttft": [r.ttft for r in ok],
        "tpot": [t for t in map(tpot, ok) if t is not None],
        "itl": [gap for r in ok for gap in r.itl],
        "e2el": [r.latency for r in ok],
    }
    summary = {
        "duration": duration,
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": output_tokens / duration if duration > 0 else 0.0,
        "total_token_throughput": (input_tokens + output_tokens) / duration if duration > 0 else 0.0,
        "token_counts": "server usage" if ok and all(r.usage_reported for r in ok) else "streamed chunks",
    }
    for name in LATENCIES:
        for stat, value in describe_ms(samples[name]).items():
            summary[f"{stat}_{name}_ms"] = value
    return summary


def format_table(summary: dict, title: str = "Serving Benchmark Result") -> str:
    """A plain-text report: totals and throughputs, then mean/p50/p90/p99 of each latency."""
    rows = [
        ("Successful requests", f"{summary['completed']}"),
        ("Failed requests", f"{summary['failed']}"),
        ("Benchmark duration (s)", f"{summary['duration']:.2f}"),
        ("Total input tokens", f"{summary['total_input_tokens']}"),
        ("Total generated tokens", f"{summary['total_output_tokens']}"),
        ("Request throughput (req/s)", f"{summary['request_throughput']:.2f}"),
        ("Output token throughput (tok/s)", f"{summary['output_throughput']:.2f}"),
        ("Total token throughput (tok/s)", f"{summary['total_token_throughput']:.2f}"),
    ]
    lines = [f"{' ' + title + ' ':=^60}"]
    lines += [f"{name:<44}{value:>16}" for name, value in rows]
    columns = ["mean", *(f"p{q}" for q in PERCENTILES)]
    lines.append(f"{' Latency (ms) ':-^60}")
    lines.append(f"{'':<20}" + "".join(f"{c:>10}" for c in columns))
    for name in LATENCIES:
        lines.append(f"{LABELS[name]:<20}" + "".join(f"{summary[f'{c}_{name}_ms']:>10.2f}" for c in columns))
    lines.append("=" * 60)
    return "\n".join(lines)
