"""A decoder layer's kernels on one timeline, from a torch profiler trace (rank_waits.py's or
profile_decode.py's): for each kernel from the down projection before the qkv GEMV to the down projection
after it, the median start and end relative to the qkv GEMV's end, and its mean exclusive time, over the
layers of the decode steps. Shows which kernel ends how long after the one before (session 30: the LL
sum ends 4.7 us after its GEMV at TP=2, the plain norm 3.0 us at TP=1). Runs here, on the traces that
come back:

    python scripts/device/layer_timeline.py [LABEL=]TRACE ...
"""

from __future__ import annotations

import argparse
import statistics

from trace_kernels import device_events, lm_head_indices  # scripts/device: this script's folder

SPAN = 12  # kernels shown: 3 before the qkv GEMV's end (down, its sum, qkv) and 9 after


def timeline(events: list[dict]) -> list[tuple[str, float, float, float]]:
    """(name, median start, median end, mean exclusive) of the SPAN kernels around each qkv GEMV (a dense GEMV
    followed by the rotary kernel), in us from that GEMV's end."""
    heads = lm_head_indices(events)[1:]  # the prefill's LM head left out
    decode = events[heads[0] + 1: heads[-1] + 1]
    places: dict[int, list[tuple[str, float, float, float]]] = {}
    for i in range(3, len(decode) - SPAN):
        if "rotary" not in decode[i]["name"] or "dense_gemv" not in decode[i - 1]["name"]:
            continue
        base = decode[i - 1]["ts"] + decode[i - 1]["dur"]
        for j, e in enumerate(decode[i - 3: i - 3 + SPAN]):
            places.setdefault(j, []).append((e["name"], e["ts"] - base, e["ts"] + e["dur"] - base, e["exclusive"]))
    rows = []
    for _, seen in sorted(places.items()):
        name = statistics.mode(s[0] for s in seen)
        rows.append((name, statistics.median(s[1] for s in seen), statistics.median(s[2] for s in seen),
                     statistics.mean(s[3] for s in seen)))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", help="trace files, each optionally LABEL=PATH (else labelled by its name)")
    for arg in p.parse_args().traces:
        label, _, path = arg.rpartition("=")
        print(label or path)
        for name, start, end, exclusive in timeline(device_events(path)):
            short = name.replace("void pagoda::", "").replace("(anonymous namespace)::", "")[:40]
            print(f"  {short:40s} start {start:7.2f}  end {end:7.2f}  exclusive {exclusive:5.2f}")


if __name__ == "__main__":
    main()
