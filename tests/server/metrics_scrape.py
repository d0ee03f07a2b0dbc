"""/metrics as prometheus_client's text parser reads it, and the requests the metrics tests send."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, tuple[tuple[str, str], ...]]  # (sample name, sorted labels)


def scrape(url: str) -> dict[Sample, float]:
    """Every sample of ``url``/metrics, parsed by prometheus_client (which rejects malformed text); each
    histogram's buckets are checked to be cumulative and to end at its count."""
    text = httpx.get(url + "/metrics", timeout=10).text
    samples: dict[Sample, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        if family.type == "histogram":
            check_histogram(family)
    return samples


def check_histogram(family) -> None:
    series: dict[tuple, list] = {}
    counts: dict[tuple, float] = {}
    for s in family.samples:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
        if s.name.endswith("_bucket"):
            series.setdefault(key, []).append((float(s.labels["le"]), s.value))
        elif s.name.endswith("_count"):
            counts[key] = s.value
    for key, buckets in series.items():
        values = [v for _, v in sorted(buckets)]
        assert values == sorted(values), (family.name, key, values)
        assert values[-1] == counts[key], (family.name, key)


def total(samples: dict[Sample, float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls))


def delta(after: dict, before: dict, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def wait_until(check, timeout: float = 15.0, message: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, message
        time.sleep(0.1)


@dataclass
class Sent:
    """One engine request the test made, as its response reported it."""

    n: int
    max_tokens: int
    prompt_tokens: int
    completion_tokens: int  # over its n sequences
    longest: int  # tokens of its longest sequence
    reasons: list[str]


def complete(url: str, headers: dict, body: dict, path: str = "/v1/completions") -> Sent:
    """A request, streamed when ``body`` says so (with usage in the last chunk)."""
    body = {**body, "stream_options": {"include_usage": True}} if body.get("stream") else body
    if not body.get("stream"):
        reply = httpx.post(url + path, json=body, headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        reply = reply.json()
        return _sent(body, reply["usage"], [c["finish_reason"] for c in reply["choices"]])
    usage, reasons = None, []
    with httpx.stream("POST", url + path, json=body, headers=headers, timeout=60) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            reasons += [c["finish_reason"] for c in chunk.get("choices", []) if c.get("finish_reason")]
            usage = chunk.get("usage") or usage
    return _sent(body, usage, reasons)


def _sent(body: dict, usage: dict, reasons: list[str]) -> Sent:
    n = body.get("n", 1)
    longest = usage["completion_tokens"] if n == 1 else body["max_tokens"]  # n > 1: every sequence runs to length
    return Sent(n, body["max_tokens"], usage["prompt_tokens"], usage["completion_tokens"], longest, reasons)
