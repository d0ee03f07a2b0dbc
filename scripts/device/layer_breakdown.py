"""Where a decode step's time goes, per decoder layer, from a torch profiler trace (rank_waits.py's or
profile_decode.py's): each kernel's exclusive time plus the idle gap before it, summed by kind over the
decode steps (from the second LM head to the last: the prefill and the first decode step after it are
left out) and divided by steps and layers; the rest of the step (LM head, sampler, copies, embedding)
by step. Runs here, on the traces that come back; issue 15 set TP=1 and TP=2 side by side this way
(benchmarks/results/h200x2_2026-11-28_round27/).

    python scripts/device/layer_breakdown.py [LABEL=]TRACE ... --layers 32 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from trace_kernels import LAYER_GEMVS, device_events, label, lm_head_indices  # scripts/device: this script's folder

KINDS = {  # kind -> kernel-name fragments (after trace_kernels.label's naming)
    "dense GEMVs": tuple(f"gemv {g}" for g in LAYER_GEMVS),
    "norms / LL sums": ("fused_add_rms_norm", "ll_all_reduce_add_rms_norm"),
    "attention": ("rotary", "_kv_write", "_decode_kernel", "_reduce_kernel"),
    "SiLU-and-mul": ("silu_and_mul",),
}


def breakdown(events: list[dict], layers: int) -> dict[str, float]:
    """Microseconds per layer of each kind of KINDS, the layer's total, and per step: the step and the rest."""
    heads = lm_head_indices(events)[1:]  # the prefill's LM head left out
    if len(heads) < 2:
        raise ValueError("need a prefill and two decode steps or more (three LM heads) in the trace")
    decode = events[heads[0] + 1: heads[-1] + 1]
    steps = len(heads) - 1
    groups = label(decode, list(LAYER_GEMVS))
    out = {}
    for kind, fragments in KINDS.items():
        spent = sum(e["exclusive"] + e["gap"] for name, evs in groups.items() if any(f in name for f in fragments)
                    for e in evs)
        out[kind] = spent / steps / layers
    out["layer"] = sum(out[kind] for kind in KINDS)
    out["step"] = (events[heads[-1]]["ts"] - events[heads[0]]["ts"]) / steps
    out["rest of the step"] = out["step"] - layers * out["layer"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("traces", nargs="+", help="trace files, each optionally LABEL=PATH (else labelled by its name)")
    p.add_argument("--layers", type=int, required=True, help="decoder layers of the model")
    p.add_argument("--json", type=Path, help="write {label: breakdown} here")
    args = p.parse_args()
    results = {}
    for arg in args.traces:
        name, _, path = arg.rpartition("=")
        name = name or Path(path).name
        results[name] = breakdown(device_events(path), args.layers)
        print(name)
        for kind, us in results[name].items():
            print(f"  {kind:18s} {us:9.2f} us")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
