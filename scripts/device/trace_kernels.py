"""Per-kernel times of a decode-step trace from profile_decode.py (trace_*.json[.gz], rank 0's stream).

For each kernel (the dense GEMVs named by their place in a decoder layer: qkv, o, gate_up, down; the
LM head by its grid): how many a step, the mean duration, the mean exclusive time (the part past the
end of every kernel before it: a programmatic dependent's wait for the kernel before counts there)
and the mean idle gap before it. Runs here, on the traces that come back:

    python scripts/device/trace_kernels.py benchmarks/results/.../trace_tp2_b1.json.gz --steps 32
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics

DEVICE_EVENTS = ("kernel", "gpu_memcpy", "gpu_memset")  # a torch profiler trace's events that run on the device
LAYER_GEMVS = ("qkv", "o", "gate_up", "down")  # a decoder layer's dense GEMVs in launch order


def device_events(path: str) -> list[dict]:
    """The trace's device events, :func:`timed`."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
        trace = json.load(f)
    return timed([e for e in trace["traceEvents"] if e.get("cat") in DEVICE_EVENTS])


def timed(events: list[dict]) -> list[dict]:
    """``events`` in time order, each given its ``exclusive`` time (the part past the end of every event
    before it: their union, PDL overlaps counted once) and the idle ``gap`` before it (0 for the first)."""
    events = sorted(events, key=lambda e: e["ts"])
    end = events[0]["ts"] if events else 0.0
    for e in events:
        e["exclusive"] = max(0.0, e["ts"] + e["dur"] - max(e["ts"], end))
        e["gap"] = max(0.0, e["ts"] - end)
        end = max(end, e["ts"] + e["dur"])
    return events


def gemv_grid(event: dict) -> int | None:
    """The grid (blocks) of a dense GEMV event, None for any other kernel."""
    return event["args"].get("grid", [0])[0] if "dense_gemv" in event["name"] else None


def lm_head_indices(events: list[dict]) -> list[int]:
    """Indices of the LM head's GEMVs: one a step, at its end; the dense GEMV grid whose launches run longest
    (median): the largest weight of a step. Not the widest grid: the tune may run the LM head on two rows a
    warp, in fewer blocks than the gate-up projection (session 30)."""
    durations: dict[int, list[float]] = collections.defaultdict(list)
    for e in events:
        grid = gemv_grid(e)
        if grid:
            durations[grid].append(e["dur"])
    if not durations:
        return []
    longest = max(durations, key=lambda grid: statistics.median(durations[grid]))
    return [i for i, e in enumerate(events) if gemv_grid(e) == longest]


def label(events: list[dict], layer_gemvs: list[str]) -> dict[str, list[dict]]:
    """Events by name; dense GEMVs by their place in a layer (the widest grid: the LM head)."""
    heads = set(lm_head_indices(events))
    groups: dict[str, list[dict]] = collections.defaultdict(list)
    place = 0
    for i, e in enumerate(events):
        name = e["name"]
        if i in heads:
            groups["gemv lm_head"].append(e)
            place = 0
        elif "dense_gemv" in name:
            groups[f"gemv {layer_gemvs[place % len(layer_gemvs)]}"].append(e)
            place += 1
        else:
            groups[name.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0][:70]].append(e)
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=32, help="decode steps in the trace")
    parser.add_argument("--layer-gemvs", default=",".join(LAYER_GEMVS), help="a layer's dense GEMVs in launch order")
    args = parser.parse_args()
    print(table(device_events(args.trace), args.layer_gemvs.split(","), args.steps))


def table(events: list[dict], layer_gemvs: list[str], steps: int) -> str:
    """The kernels by total exclusive time: count a step, mean duration, mean exclusive time, mean gap."""
    groups = label(events, layer_gemvs)
    rows = sorted(groups.items(), key=lambda kv: -sum(e["exclusive"] for e in kv[1]))
    lines = [f"{'per step':>8} {'mean us':>8} {'excl us':>8} {'gap us':>7}  kernel"]
    for name, evs in rows:
        n = len(evs)
        mean, exclusive, gap = (sum(e[key] for e in evs) / n for key in ("dur", "exclusive", "gap"))
        lines.append(f"{n / steps:8.1f} {mean:8.2f} {exclusive:8.2f} {gap:7.2f}  {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
