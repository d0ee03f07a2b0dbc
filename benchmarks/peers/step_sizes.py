"""Each engine's steps over one timed run, from its Prometheus histogram of tokens computed a step
(``<prefix>:iteration_tokens_total``: vLLM's, and Pagoda's with the same buckets), scraped before and after the
run: how many steps ran, their tokens, and how many steps fell in each bucket. With the run's duration this gives
the time per step; where two engines ran the same requests, more tokens in the large buckets means bigger mixed
steps (prompt tokens beside decodes), which is where inter-token latency's tail comes from.

The two count alike for prompts computed within one step. They differ for a prompt split over several steps:
Pagoda counts each chunk in its own step, vLLM 0.26 counts all of the prompt's computed tokens (cache hits left
out on both) in the step that finishes it, so its histogram can show a step above the token budget and one
below what it computed."""

from __future__ import annotations

import math
import re

BUCKET = re.compile(r'^[a-zA-Z_:][\w:]*:iteration_tokens_total_bucket\{[^}]*\ble="([^"]+)"[^}]*\}\s+(\S+)')
TOTAL = re.compile(r"^[a-zA-Z_:][\w:]*:iteration_tokens_total_(sum|count)(?:\{[^}]*\})?\s+(\S+)")


def parse(text: str) -> dict:
    """{"buckets": {upper bound: steps at or below it, summed over engines}, "sum": tokens, "count": steps}."""
    out: dict = {"buckets": {}, "sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        if match := BUCKET.match(line):
            bound = float(match.group(1))  # "+Inf" -> inf, "8" and "8.0" alike
            out["buckets"][bound] = out["buckets"].get(bound, 0.0) + float(match.group(2))
        elif match := TOTAL.match(line):
            out[match.group(1)] += float(match.group(2))
    return out


def window(before: dict, after: dict, duration_s: float | None) -> dict | None:
    """The run's steps: their count, tokens, mean tokens, the run's duration per step, and the steps between each
    bucket's bounds (``"<=N"``: more than the bound below, at most N). None where the engine exports no histogram."""
    steps = after["count"] - before["count"]
    if not after["buckets"] or steps <= 0:
        return None
    tokens = after["sum"] - before["sum"]
    counts, below = {}, 0.0
    for bound in sorted(after["buckets"]):
        cumulative = after["buckets"][bound] - before["buckets"].get(bound, 0.0)
        label = "<=inf" if math.isinf(bound) else f"<={bound:g}"
        counts[label], below = int(cumulative - below), cumulative
    out = {"steps": int(steps), "tokens": int(tokens), "mean_tokens": round(tokens / steps, 1), "buckets": counts}
    if duration_s:
        out["ms_per_step"] = round(duration_s / steps * 1e3, 3)
    return out
