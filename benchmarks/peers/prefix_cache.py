"""Each engine's prefix-cache hit rate over one timed run, from its Prometheus /metrics before and after.

With token counters (`<prefix>:prefix_cache_queries_total` and `..._hits_total`: vLLM's, and Pagoda's once it
exports them) the run's rate is hits / queries between the two scrapes. With only Pagoda's gauge of the
rate since start (`pagoda:prefix_cache_hit_rate`) it is estimated from the gauge and the prompt tokens counted
meanwhile (`pagoda:prompt_tokens_total`: the tokens looked up, as long as nothing was preempted)."""

from __future__ import annotations

import re

SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
FLAG_ABOVE = 0.01  # a run of fresh prompts whose hit rate exceeds this is flagged in the report


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: value summed over its label sets} (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            try:
                out[match.group(1)] = out.get(match.group(1), 0.0) + float(match.group(3))
            except ValueError:
                continue
    return out


def _named(metrics: dict[str, float], suffix: str) -> float | None:
    values = [v for k, v in metrics.items() if k.endswith(":" + suffix)]
    return sum(values) if values else None


def window(before: dict[str, float], after: dict[str, float]) -> dict:
    """{"hit_rate": float | None, "queries": tokens looked up, "method": how it was measured}."""
    queries = [_named(m, "prefix_cache_queries_total") for m in (before, after)]
    hits = [_named(m, "prefix_cache_hits_total") for m in (before, after)]
    if None not in queries and None not in hits:
        looked_up = queries[1] - queries[0]
        rate = (hits[1] - hits[0]) / looked_up if looked_up > 0 else 0.0
        return {"hit_rate": rate, "queries": looked_up, "method": "counters"}
    rates = [_named(m, "prefix_cache_hit_rate") for m in (before, after)]
    prompts = [_named(m, "prompt_tokens_total") for m in (before, after)]
    if None not in rates and None not in prompts:
        looked_up = prompts[1] - prompts[0]
        hit_tokens = rates[1] * prompts[1] - rates[0] * prompts[0]
        rate = max(0.0, hit_tokens / looked_up) if looked_up > 0 else 0.0
        return {"hit_rate": rate, "queries": looked_up, "method": "estimated from the hit-rate gauge"}
    return {"hit_rate": None, "queries": None, "method": "not exported"}


def flagged(hit_rate: float | None, expects_hits: bool) -> bool:
    """Whether a run's hit rate says its prompts were not fresh (runs meant to share prefixes excepted)."""
    return not expects_hits and hit_rate is not None and hit_rate > FLAG_ABOVE
