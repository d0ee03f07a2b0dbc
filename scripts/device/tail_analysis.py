"""Where served inter-token gaps come from: join `pagoda bench serve --save-detailed` (client chunk times)
with the engine core's step trace (PAGODA_TRACE_DIR's core.jsonl); both on CLOCK_MONOTONIC.

    python3 scripts/device/tail_analysis.py TRACE_DIR/core.jsonl RESULT.json [--out summary.json]

Prints the core's step-to-step intervals during the run (decode-only steps, and mixed steps: more tokens than
sequences, i.e. a prefill chunk among them) at p50/p90/p99, the client's ITL at the same quantiles, and
for every client gap above 2x the median ITL whether the core ran a mixed step or a slow step (over
2x the median decode interval) inside that gap, or neither (the delay is outside the core: API server,
transport, client), the eight slowest steps (with the core's garbage collection and device-allocator
events inside each), how many steps allocated device memory, and each traced process's garbage-collection
pauses during the run. Then the TTFT of the run's requests in parts, from the core's request records
(and the API servers' api_*.jsonl beside core.jsonl): API arrival -> core received -> first launched ->
first token read -> first output at the HTTP handler, at p50/p99 over all requests and averaged over
the slowest 1%.
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from pathlib import Path


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), **{f"p{q}_ms": round(pick(q / 100) * 1e3, 2) for q in (50, 90, 99)}}


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def core_steps(records: list[dict]) -> list[dict]:
    """Steps with ``interval``: start to the next step's start (the last step has none)."""
    steps = [r for r in records if "step" in r and r["tokens"] > 0]
    for step, after in zip(steps, steps[1:]):
        step["interval"] = after["step"] - step["step"]
    return [s for s in steps if "interval" in s]


def client_gaps(result: dict) -> list[tuple[float, float]]:
    """(start, end) of every gap between two content chunks of a request."""
    gaps = []
    for start, ttft, itls in zip(result["start_times"], result["ttfts"], result["itls"]):
        t = start + ttft
        for gap in itls:
            gaps.append((t, t + gap))
            t += gap
    return gaps


def classify(gaps: list[tuple[float, float]], steps: list[dict], slow: float) -> dict[str, int]:
    starts = [s["step"] for s in steps]
    counts = {"mixed_step_inside": 0, "slow_step_inside": 0, "outside_the_core": 0}
    for begin, end in gaps:
        inside = steps[max(0, bisect.bisect_left(starts, begin) - 1):bisect.bisect_right(starts, end)]
        if any(s["tokens"] > s["seqs"] for s in inside):
            counts["mixed_step_inside"] += 1
        elif any(s["interval"] > slow for s in inside):
            counts["slow_step_inside"] += 1
        else:
            counts["outside_the_core"] += 1
    return counts


ALLOCATOR_EVENTS = ("device_allocs", "alloc_retries")  # a step's cudaMalloc calls and flush-and-retry allocations
SEGMENTS = (("queue_to_core", "arrival", "received"), ("wait_for_launch", "received", "launched"),
            ("first_step", "launched", "first_token"), ("back_to_handler", "first_token", "first_output"))


def ttft_parts(core: list[dict], apis: list[list[dict]], begin: float, end: float) -> dict:
    """The core's first-token records of requests that arrived in [begin, end], joined with the API
    servers' first outputs: each segment's p50/p99, and its mean over the slowest 1% (arrival to
    first output, or to first token without API traces)."""
    records = {r["request"]: r for r in core if "first_token" in r and begin <= r["arrival"] <= end}
    for api in apis:
        for r in api:
            if r.get("request") in records:  # (gc lines have none)
                records[r["request"]]["first_output"] = r["first_output"]
    rows = [r for r in records.values() if r.get("launched") is not None]
    if not rows:
        return {}
    last = "first_output" if all("first_output" in r for r in rows) else "first_token"
    rows.sort(key=lambda r: r[last] - r["arrival"])
    slowest = rows[-max(1, len(rows) // 100):]
    parts = {}
    for name, a, b in SEGMENTS:
        if b == "first_output" and last != b:
            continue
        values = [r[b] - r[a] for r in rows]
        parts[name] = {**quantiles(values), "slowest_1pct_mean_ms": round(1e3 * statistics.mean(r[b] - r[a] for r in slowest), 2)}
    return parts


def gc_pauses(records: list[dict], begin: float, end: float) -> dict:
    """The garbage-collection pauses a process traced in [begin, end]: count, total, longest, 5 ms or more."""
    pauses = [r["seconds"] for r in records if "gc" in r and begin <= r["start"] <= end]
    return {"n": len(pauses), "total_ms": round(1e3 * sum(pauses), 1), "max_ms": round(1e3 * max(pauses, default=0), 1),
            "n_5ms": sum(p >= 5e-3 for p in pauses)}


def gc_inside(records: list[dict], begin: float, end: float) -> float:
    """Milliseconds of garbage collection that started in [begin, end)."""
    return round(1e3 * sum(r["seconds"] for r in records if "gc" in r and begin <= r["start"] < end), 1)


def analyse(trace: Path, result_path: Path) -> dict:
    files = {path.stem: read_jsonl(path) for path in sorted({trace, *trace.parent.glob("*.jsonl")})}  # each read once
    core = files[trace.stem]
    result = json.loads(result_path.read_text())
    gaps = client_gaps(result)
    begin, end = min(result["start_times"]), max(e for _, e in gaps)
    steps = [s for s in core_steps(core) if begin <= s["step"] <= end]  # this run's steps (a trace may hold several)
    decode = [s["interval"] for s in steps if s["tokens"] == s["seqs"]]
    mixed = [s["interval"] for s in steps if s["tokens"] > s["seqs"]]
    itl = [end - begin for begin, end in gaps]
    median_itl = statistics.median(itl)
    long_gaps = [g for g in gaps if g[1] - g[0] > 2 * median_itl]
    return {"decode_steps": quantiles(decode), "mixed_steps": quantiles(mixed), "client_itl": quantiles(itl),
            "long_gaps": len(long_gaps), "long_gap_threshold_ms": round(2e3 * median_itl, 2),
            "long_gaps_by_cause": classify(long_gaps, steps, 2 * statistics.median(decode)),
            "slowest_steps": [{"ms": round(s["interval"] * 1e3, 1), "tokens": s["tokens"], "seqs": s["seqs"],
                               "gc_ms": gc_inside(core, s["step"], s["step"] + s["interval"]),
                               **{k: s[k] for k in ALLOCATOR_EVENTS if k in s}}
                              for s in sorted(steps, key=lambda s: -s["interval"])[:8]],
            "steps_with_allocator_events": {k: sum(k in s for s in steps) for k in ALLOCATOR_EVENTS},
            "gc_pauses": {name: gc_pauses(records, begin, end) for name, records in files.items()},
            "ttft_parts": ttft_parts(core, [records for name, records in files.items() if name.startswith("api_")],
                                     min(result["start_times"]) - 1.0, max(result["start_times"]) + 1.0)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path, help="core.jsonl of PAGODA_TRACE_DIR")
    p.add_argument("result", type=Path, help="pagoda bench serve --result-file ... --save-detailed")
    p.add_argument("--out", type=Path, help="also write the summary here as JSON")
    args = p.parse_args()
    summary = analyse(args.trace, args.result)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
