"""One engine against itself: two settings' runs of the peers harness (``--engines pagoda`` with and without a
flag, say), each a median over every server start in its files, with the range and the ratio to the base.

    python -m benchmarks.peers.compare --base off1.json off2.json --other cap1.json cap2.json [--markdown]

Where report.py sets Pagoda beside vLLM, this sets a setting beside Pagoda's own default: an A/B decision
(benchmarks/results/h100_prefill_cap/README.md's repeated table is its ``--markdown`` output).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402

# (metric, column, unit divisor, unit): the served figures an A/B decision reads
COLUMNS = (("request_throughput", "requests/s", 1, ""), ("p50_ttft_ms", "TTFT p50", 1000, " s"),
           ("p99_ttft_ms", "TTFT p99", 1000, " s"), ("p50_tpot_ms", "TPOT p50", 1, " ms"),
           ("p90_itl_ms", "ITL p90", 1, " ms"), ("p99_itl_ms", "ITL p99", 1, " ms"))


def grouped(runs: list[dict], engine: str) -> dict[tuple, list[dict]]:
    """``engine``'s measurements in ``runs`` by (workload, client, limits), as report.py keys them (a run made
    before measurements carried their limits: its settings'): one per server start, none replacing another."""
    out: dict[tuple, list[dict]] = {}
    for run in runs:
        for m in run.get("measurements", []):
            if m["engine"] == engine:
                m.setdefault("limits", report.run_limits(run))
                out.setdefault(report.key(m), []).append(m)
    return out


def summary(ms: list[dict], metric: str) -> dict | None:
    values = [m["metrics"][metric] for m in ms if metric in m["metrics"]]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "starts": len(values)}


def compare(base: list[dict], other: list[dict], engine: str = "pagoda") -> list[dict]:
    """A row per (workload, client, limits) that both sides measured: each metric's median and range over
    each side's server starts, and ``ratio`` = other's median / base's."""
    a, b = grouped(base, engine), grouped(other, engine)
    rows = []
    for k in (k for k in a if k in b):
        metrics = {}
        for metric, *_ in COLUMNS:
            sa, sb = summary(a[k], metric), summary(b[k], metric)
            if sa and sb:
                metrics[metric] = {"base": sa, "other": sb, "ratio": sb["median"] / sa["median"]}
        rows.append({"workload": k[0], "client": k[1], "limits": k[2], "metrics": metrics})
    return rows


def cell(s: dict, divisor: float, unit: str) -> str:
    def fmt(v: float) -> str:
        return f"{v / divisor:.2f}" if divisor > 1 else f"{v:.1f}"
    return f"{fmt(s['median'])}{unit} ({fmt(s['min'])}-{fmt(s['max'])})"


def markdown(rows: list[dict], base_label: str, other_label: str) -> str:
    """README's table: a base line and an other line per workload, the other's cells with their ratio; the
    columns every row has."""
    cols = [c for c in COLUMNS if all(c[0] in r["metrics"] for r in rows)]
    lines = ["| workload, setting | starts | " + " | ".join(c[1] for c in cols) + " |", "| --- " * (len(cols) + 2) + "|"]
    for r in rows:
        for side, label in (("base", base_label), ("other", other_label)):
            cells = [cell(r["metrics"][m][side], div, unit)
                     + (f", {r['metrics'][m]['ratio']:.2f}x" if side == "other" else "") for m, _, div, unit in cols]
            starts = max(s[side]["starts"] for s in r["metrics"].values())
            lines.append(f"| {r['workload']}, {label} | {starts} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def load(files: list[str]) -> list[dict]:
    return [json.loads(Path(f).read_text()) for f in files]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one engine's figures under two settings: medians over server starts, "
                                            "ranges and ratios (other / base)")
    p.add_argument("--base", nargs="+", required=True, help="run.py JSON files of the base setting")
    p.add_argument("--other", nargs="+", required=True, help="run.py JSON files of the setting set against it")
    p.add_argument("--engine", default="pagoda", choices=("pagoda", "vllm"), help="whose figures (default %(default)s)")
    p.add_argument("--labels", default="base,other", help="the two settings' names in the table (default %(default)s)")
    p.add_argument("--markdown", action="store_true", help="print a Markdown table (default: JSON)")
    args = p.parse_args(argv)
    rows = compare(load(args.base), load(args.other), args.engine)
    if not rows:
        p.error(f"no workload that {args.engine} ran under both settings")
    labels = args.labels.split(",")
    if len(labels) != 2:
        p.error("--labels takes two names, comma-separated")
    print(markdown(rows, *labels) if args.markdown else json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
