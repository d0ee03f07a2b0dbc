"""Where served latency goes, from a ``PAGODA_TRACE_DIR`` folder (docs/server.md, "Tracing latency").

    python benchmarks/trace_report.py TRACE_DIR [--top 10] [--since T] [--out report.json] [--client RAW.json]

Reads the engine core's ``core.jsonl`` (a line per step and per first token) and each API server's
``api_<pid>.jsonl`` (a line per request whose first output reached its handler), and reports:

- **steps**: how long the engine core's step calls took (milliseconds, p50/p90/p99/max), decode-only steps (one
  token per sequence) apart from mixed ones (some sequence computes prompt tokens); with overlapped steps a call
  mostly waits for the step before on the device, so this is the device's step time as the host sees it, unless
  the host's own work takes longer: ``after_mixed``, the calls right after a mixed one, are short when the device
  had finished a mixed step before the host came to it (the mixed step's time was the host's);
- **slowest_steps**: the ``--top`` longest, each with its tokens, sequences, device-allocator events and the
  engine core's garbage-collection pauses inside it;
- **first_tokens**: each request's time to first token split into its parts: ``to_core`` (API server to engine
  core), ``queued`` (waiting for its first step), ``prefill`` (first step launched to its first token read),
  ``to_handler`` (core to the HTTP handler), and ``ttft`` (arrival at the API server to the handler);
- **slowest_first_tokens**: the ``--top`` longest TTFTs with that split;
- **gc**: each process's collections of 0.5 ms or more (count, total, longest, full ones);
- **long_itls** (with ``--client``, a ``pagoda bench serve --save-detailed`` result file of the same run): the
  client's inter-token gaps longer than ``--long-itl-ms``, each put down to what the engine core ran meanwhile:
  a mixed step, a decode step slower than 1.5x the median decode step, or neither (``outside_the_core``: the API
  server, the network, the client).

All times are ``time.monotonic()`` seconds in the files (one clock for every process of a host); ``--since T``
keeps what started at ``T`` or later (e.g. after a warm-up: ``python -c "import time; print(time.monotonic())"``).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
from pathlib import Path

PHASES = ("to_core", "queued", "prefill", "to_handler", "ttft")


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def percentiles(values: list[float]) -> dict:
    """Nearest-rank p50/p90/p99 and the max of ``values`` (milliseconds, rounded to 0.01), with their count."""
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    if not ordered:
        return {"count": 0}
    return {"count": len(ordered), **{f"p{p}_ms": round(rank(p) * 1e3, 2) for p in (50, 90, 99)},
            "max_ms": round(ordered[-1] * 1e3, 2)}


def step_kind(step: dict) -> str:
    return "decode" if step["tokens"] == step["seqs"] else "mixed"


def pauses_within(pauses: list[dict], start: float, end: float) -> float:
    """Seconds of the ``pauses`` that overlap [start, end]."""
    return sum(max(0.0, min(end, p["start"] + p["seconds"]) - max(start, p["start"])) for p in pauses)


def steps_report(steps: list[dict], pauses: list[dict], top: int) -> tuple[dict, list[dict]]:
    busy = [s for s in steps if s["seqs"]]
    summary = {"all": percentiles([s["seconds"] for s in busy])}
    for kind in ("decode", "mixed"):
        summary[kind] = percentiles([s["seconds"] for s in busy if step_kind(s) == kind])
    # with overlapped steps the call after a mixed one waits for that step on the device: when it is short, the
    # device had finished before the host came to it, so the mixed step's time was the host's
    summary["after_mixed"] = percentiles([b["seconds"] for a, b in zip(busy, busy[1:]) if step_kind(a) == "mixed"])
    first = min((s["step"] for s in steps), default=0.0)
    slowest = []
    for s in sorted(busy, key=lambda s: s["seconds"], reverse=True)[:top]:
        extra = {k: v for k, v in s.items() if k not in ("step", "seconds", "tokens", "seqs", "outputs")}
        slowest.append({"at_s": round(s["step"] - first, 4), "ms": round(s["seconds"] * 1e3, 2), "kind": step_kind(s),
                        "tokens": s["tokens"], "seqs": s["seqs"],
                        "gc_ms": round(pauses_within(pauses, s["step"], s["step"] + s["seconds"]) * 1e3, 2), **extra})
    return summary, slowest


def first_token_phases(core_first: dict, api_first: dict | None) -> dict:
    """A request's TTFT parts in seconds (the API server's parts only where its line is there)."""
    phases = {"to_core": core_first["received"] - core_first["arrival"],
              "queued": core_first["launched"] - core_first["received"],
              "prefill": core_first["first_token"] - core_first["launched"]}
    if api_first is not None:
        phases["to_handler"] = api_first["first_output"] - core_first["first_token"]
        phases["ttft"] = api_first["first_output"] - api_first["arrival"]
    return phases


def first_tokens_report(core_firsts: list[dict], api_firsts: dict[str, dict], top: int) -> tuple[dict, list[dict]]:
    split = {f["request"]: first_token_phases(f, api_firsts.get(f["request"])) for f in core_firsts}
    summary = {phase: percentiles([p[phase] for p in split.values() if phase in p]) for phase in PHASES}

    def ttft(phases: dict) -> float:
        return phases.get("ttft", phases["to_core"] + phases["queued"] + phases["prefill"])

    slowest = [{"request": request, **{f"{k}_ms": round(v * 1e3, 2) for k, v in phases.items()}}
               for request, phases in sorted(split.items(), key=lambda item: ttft(item[1]), reverse=True)[:top]]
    return summary, slowest


def gc_report(pauses: list[dict]) -> dict:
    return {"count": len(pauses), "total_ms": round(sum(p["seconds"] for p in pauses) * 1e3, 2),
            "max_ms": round(max((p["seconds"] for p in pauses), default=0.0) * 1e3, 2),
            "full": sum(1 for p in pauses if p["gc"] == 2)}


def client_gaps(client: dict) -> list[tuple[float, float]]:
    """(start, end) of every inter-token gap of a ``--save-detailed`` client result (``time.perf_counter()``, the
    monotonic clock of the trace on Linux)."""
    gaps = []
    for start, ttft, itls in zip(client["start_times"], client["ttfts"], client["itls"]):
        t = start + ttft
        for itl in itls:
            gaps.append((t, t + itl))
            t += itl
    return gaps


def long_itls_report(steps: list[dict], gaps: list[tuple[float, float]], threshold_s: float) -> dict:
    """The client's gaps over ``threshold_s`` by what the engine core ran meanwhile (module docstring)."""
    busy = [s for s in steps if s["seqs"]]
    decodes = sorted(s["seconds"] for s in busy if step_kind(s) == "decode")
    slow = 1.5 * decodes[len(decodes) // 2] if decodes else math.inf
    spans = sorted((s["step"], s["step"] + s["seconds"], step_kind(s), s["seconds"]) for s in busy)
    starts = [span[0] for span in spans]
    causes = {"mixed_step": 0, "slow_decode_step": 0, "outside_the_core": 0}
    long = [(a, b) for a, b in gaps if b - a > threshold_s]
    for a, b in long:
        inside = spans[max(0, bisect.bisect_left(starts, a) - 1) : bisect.bisect_right(starts, b)]
        inside = [s for s in inside if s[1] > a]
        if any(kind == "mixed" for _, _, kind, _ in inside):
            causes["mixed_step"] += 1
        elif any(seconds > slow for _, _, _, seconds in inside):
            causes["slow_decode_step"] += 1
        else:
            causes["outside_the_core"] += 1
    return {"client_itl": percentiles([b - a for a, b in gaps]), "threshold_ms": round(threshold_s * 1e3, 2),
            "long": len(long), "by_cause": causes}


def started(line: dict) -> float:
    """When what a line records began: a step's start, a request's arrival, a pause's start."""
    return line["step"] if "step" in line else line["arrival"] if "arrival" in line else line["start"]


def report(folder: Path, top: int = 10, since: float = -math.inf, client: dict | None = None,
           long_itl_s: float = 0.012) -> dict:
    """The report of one trace folder (module docstring), of what began at ``since`` or later; with ``client``
    (a ``--save-detailed`` result), its long inter-token gaps by cause."""
    core = [r for r in read_lines(folder / "core.jsonl") if started(r) >= since]
    core_pauses = [r for r in core if "gc" in r]
    api = {path.stem: [r for r in read_lines(path) if started(r) >= since] for path in sorted(folder.glob("api_*.jsonl"))}
    api_firsts = {r["request"]: r for lines in api.values() for r in lines if "first_output" in r}
    steps, slowest_steps = steps_report([r for r in core if "step" in r], core_pauses, top)
    firsts, slowest_firsts = first_tokens_report([r for r in core if "first_token" in r], api_firsts, top)
    gc = {"core": gc_report(core_pauses), **{name: gc_report([r for r in lines if "gc" in r]) for name, lines in api.items()}}
    out = {"steps": steps, "slowest_steps": slowest_steps, "first_tokens": firsts,
           "slowest_first_tokens": slowest_firsts, "gc": gc}
    if client is not None:
        out["long_itls"] = long_itls_report([r for r in core if "step" in r], client_gaps(client), long_itl_s)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace_dir", type=Path, help="the PAGODA_TRACE_DIR folder of a run")
    p.add_argument("--top", type=int, default=10, help="slowest steps and first tokens to list (default 10)")
    p.add_argument("--since", type=float, default=-math.inf,
                   help="report only what began at this time.monotonic() value or later (e.g. after a warm-up)")
    p.add_argument("--out", type=Path, help="also write the report as JSON here")
    p.add_argument("--client", type=Path, help="the `pagoda bench serve --save-detailed` result file of the same run: "
                   "its long inter-token gaps by what the engine core ran meanwhile")
    p.add_argument("--long-itl-ms", type=float, default=12.0, help="a gap longer than this is long (default 12)")
    args = p.parse_args(argv)
    if not (args.trace_dir / "core.jsonl").is_file():
        p.error(f"{args.trace_dir} has no core.jsonl: run the server with PAGODA_TRACE_DIR={args.trace_dir}")
    client = json.loads(args.client.read_text()) if args.client is not None else None
    if client is not None and "itls" not in client:
        p.error(f"{args.client} has no per-request gaps: run `pagoda bench serve` with --save-detailed")
    result = report(args.trace_dir, args.top, args.since, client, args.long_itl_ms / 1e3)
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
