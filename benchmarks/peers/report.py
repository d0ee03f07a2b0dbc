"""Results of the Pagoda-vs-vLLM comparison: measurements from each step's raw JSON, side-by-side rows
with ratios, the merge of several runs (one per device call), and the chart.

ratio = Pagoda / vLLM of the metric as measured; pagoda_advantage = ratio where higher is better
(throughputs) and 1 / ratio where lower is better (latencies), so > 1 always means Pagoda is ahead.

    python benchmarks/peers/report.py run1.json run2.json --out merged.json --chart merged.png
    python -m benchmarks.peers.report --readme [FILES]    # README's table from the raw files (readme_table.py)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ENGINES = ("pagoda", "vllm")
OFFLINE_METRICS = ("requests_per_s", "tokens_per_s", "output_tokens_per_s")
SERVED_METRICS = ("request_throughput", "output_throughput", "total_token_throughput", "mean_e2el_ms",
                  *(f"p{q}_{m}_ms" for m in ("ttft", "tpot", "itl") for q in (50, 90, 99)))
CHART_METRICS = ("requests_per_s", "step_ms", "request_throughput", "p50_ttft_ms", "p50_tpot_ms", "p99_itl_ms")


def lower_is_better(metric: str) -> bool:
    return metric.endswith("_ms") or metric in ("seconds", "step_vs_own_base")


def measurement(workload: str, client: str, engine: str, metrics: dict, limits: str = "own") -> dict:
    """One engine's figures of one (workload, client) under its scheduler limits ("matched" or "own")."""
    values = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    return {"workload": workload, "client": client, "engine": engine, "limits": limits, "metrics": values}


def from_pagoda_offline(workload: str, raw: dict, limits: str = "own") -> list[dict]:
    """`pagoda bench throughput` JSON: its "pagoda" block."""
    block = raw.get("pagoda") or {}
    metrics = {k: block[k] for k in OFFLINE_METRICS if k in block}
    return [measurement(workload, "offline", "pagoda", metrics, limits)] if block else []


def from_latency(engine: str, raw: dict, limits: str = "own") -> list[dict]:
    """`pagoda bench latency` JSON or vllm_offline.py's "latency" block: one measurement per batch size."""
    return [measurement(f"latency_b{row['batch']}", "offline", engine, {"step_ms": row["step_ms"]}, limits)
            for row in raw.get("steps") or [] if "step_ms" in row]


def from_vllm_offline(raw: dict, limits: str = "own") -> list[dict]:
    out = [measurement(name, "offline", "vllm", {k: rates[k] for k in OFFLINE_METRICS if k in rates}, limits)
           for name, rates in (raw.get("throughput") or {}).items()]
    return out + from_latency("vllm", raw.get("latency") or {}, limits)


def from_served(workload: str, client: str, engine: str, raw: dict, limits: str = "own") -> list[dict]:
    """A serving client's summary (`pagoda bench serve` or `vllm bench serve`; the same key names)."""
    if not raw.get("completed"):
        return []
    metrics = {k: raw[k] for k in SERVED_METRICS if k in raw}
    metrics["completed"], metrics["failed"] = raw["completed"], raw.get("failed", 0)
    return [measurement(workload, client, engine, metrics, limits)]


def key(m: dict) -> tuple:
    return (m["workload"], m["client"], m.get("limits", "own"))


def merge_measurements(*groups: list[dict]) -> list[dict]:
    """Later measurements of the same (workload, client, limits, engine) replace earlier ones: all the repeats
    of a later run replace all of an earlier run's."""
    merged: dict[tuple, list[dict]] = {}
    for group in groups:
        found: dict[tuple, list[dict]] = {}
        for m in group:
            found.setdefault((*key(m), m["engine"]), []).append(m)
        merged.update(found)
    return [m for ms in merged.values() for m in ms]


def highest_hit_rate(caches: list[dict]) -> float | None:
    """The highest prefix-cache hit rate over an engine's repeats (None where none was read)."""
    rates = [c["hit_rate"] for c in caches if c.get("hit_rate") is not None]
    return max(rates) if rates else None


def side_by_side(measurements: list[dict]) -> list[dict]:
    """One row per (workload, client, limits, metric) that both engines measured, with the ratios and, for
    served runs, each engine's prefix-cache hit rate over the run (``cache_flag``: one of them not about 0
    where the prompts were meant to be fresh). An engine measured more than once (``--repeats``: one server
    start each) counts with the median of its repeats; the row then gives each engine's repeats and range."""
    by_key: dict[tuple, dict[str, list[dict]]] = {}
    for m in measurements:
        by_key.setdefault(key(m), {}).setdefault(m["engine"], []).append(m)
    rows = []
    for (workload, client, limits), found in by_key.items():
        if not all(e in found for e in ENGINES):
            continue
        cache = {e: [m["prefix_cache"] for m in found[e] if "prefix_cache" in m] for e in ENGINES}
        for metric in found["pagoda"][0]["metrics"]:
            values = {e: [m["metrics"][metric] for m in found[e] if metric in m["metrics"]] for e in ENGINES}
            if metric in ("completed", "failed") or not all(values.values()):
                continue
            r = row(workload, client, metric, statistics.median(values["pagoda"]), statistics.median(values["vllm"]),
                    limits)
            if any(len(v) > 1 for v in values.values()):
                r["repeats"] = {e: len(v) for e, v in values.items()}
                r["range"] = {e: [min(v), max(v)] for e, v in values.items()}
            if any(cache.values()):
                r["prefix_cache_hit_rate"] = {e: highest_hit_rate(cs) for e, cs in cache.items() if cs}
                r["cache_flag"] = any(c.get("flagged") for cs in cache.values() for c in cs)
            rows.append(r)
    return rows


def row(workload: str, client: str, metric: str, pagoda: float, vllm: float, limits: str = "own") -> dict:
    ratio = pagoda / vllm if vllm else None
    advantage = None if not ratio else (1 / ratio if lower_is_better(metric) else ratio)
    return {"workload": workload, "client": client, "limits": limits, "metric": metric,
            "better": "lower" if lower_is_better(metric) else "higher",
            "pagoda": pagoda, "vllm": vllm, "ratio": ratio, "pagoda_advantage": advantage}


def format_table(rows: list[dict]) -> str:
    lines = [f"{'workload':<34}{'client':<8}{'limits':<9}{'metric':<24}{'pagoda':>12}{'vllm':>12}{'P/V':>8}{'adv':>7}"
             "  cache hits (P/V)"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        adv = f"{r['pagoda_advantage']:.2f}" if r["pagoda_advantage"] is not None else "-"
        hits = r.get("prefix_cache_hit_rate") or {}
        cache = "/".join("-" if hits.get(e) is None else f"{hits[e]:.1%}" for e in ENGINES) if hits else ""
        lines.append(f"{r['workload']:<34}{r['client']:<8}{r.get('limits', 'own'):<9}{r['metric']:<24}"
                     f"{r['pagoda']:>12.2f}{r['vllm']:>12.2f}{ratio:>8}{adv:>7}  {cache}"
                     f"{'  FLAG: prompts not fresh' if r.get('cache_flag') else ''}{repeats_note(r)}")
    return "\n".join(lines)


def repeats_note(r: dict) -> str:
    """Where a row is a median over server starts: how many, and each engine's range."""
    if not r.get("repeats"):
        return ""
    spans = "; ".join(f"{e} {r['range'][e][0]:.4g}-{r['range'][e][1]:.4g}" for e in ENGINES)
    return f"  median of {r['repeats']['pagoda']}/{r['repeats']['vllm']} starts ({spans})"


CHART_ORDER = {"offline": 0, "latency": 0, "serve": 1, "mixed": 2, "prefix": 3}  # README's table order


def chart(rows: list[dict], path: Path, title: str) -> Path | None:
    """Horizontal bars: Pagoda's advantage over vLLM (x, log scale; > 1 = Pagoda ahead) per headline metric."""
    picked = sorted((r for r in rows if r["metric"] in CHART_METRICS and r["pagoda_advantage"]),
                    key=lambda r: (r.get("limits") == "own", CHART_ORDER.get(r["workload"].split("_")[0], 9),
                                   r["client"]))  # stable: each group in the files' order
    if not picked:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker  # noqa: F401  (matplotlib.ticker below)

    labels = [f"{r['workload']} [{r['client']}{', own limits' if r.get('limits') == 'own' else ''}] {r['metric']}"
              for r in picked]
    values = [r["pagoda_advantage"] for r in picked]
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.32 * len(picked)))
    colors = ["#2a6f97" if v >= 1 else "#c44536" for v in values]
    ax.barh(range(len(picked)), [v - 1 for v in values], left=1.0, color=colors)  # bars grow from parity
    ax.set_xscale("log")
    low, high = min(values + [1.0]), max(values + [1.0])
    ax.set_xlim(low / 1.3, high * 2.2)
    times = matplotlib.ticker.FuncFormatter(lambda x, _: f"{x:g}x")
    ax.xaxis.set_major_formatter(times)
    ax.set_xticks([t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 4, 8) if low / 1.3 <= t <= high * 2.2])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # 0.3x ... 0.9x labels would overlap
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(picked)), labels, fontsize=7)
    ax.invert_yaxis()
    for i, r in enumerate(picked):
        ax.text(max(values[i], 1.0), i, f" {values[i]:.2f}x  (P {r['pagoda']:.4g} / V {r['vllm']:.4g})",
                va="center", fontsize=6)
    ax.set_xlabel("Pagoda relative to vLLM 0.26 (> 1: Pagoda ahead; latencies inverted)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def run_limits(run: dict) -> str:
    """A run's scheduler limits: its "limits" setting; runs made before it existed say match_limits."""
    settings = run.get("settings") or {}
    return settings.get("limits") or ("matched" if settings.get("match_limits") else "own")


def merge_runs(runs: list[dict]) -> dict:
    """Several run.py results (e.g. one per device call) as one: measurements, rows, every step's status.
    A file this wrote may be one of them (its runs are kept as they are)."""
    for run in runs:  # measurements of runs made before they carried their limits
        for m in run.get("measurements", []):
            m.setdefault("limits", run_limits(run))
    measurements = merge_measurements(*(r.get("measurements", []) for r in runs))
    meta = [m for r in runs for m in (r["runs"] if "runs" in r else [r])]
    kept = ("date", "device", "parts", "settings", "pagoda_choices", "vllm_choices")
    return {"runs": [{k: r.get(k) for k in kept} for r in meta],
            "steps": [s for r in runs for s in r.get("steps", [])],
            "measurements": measurements, "rows": side_by_side(measurements)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="merge run.py results and draw the chart; or render README's table")
    p.add_argument("runs", nargs="*", help="JSON files written by run.py (with --readme: the files README shows, "
                                           "paths from the repository root; default: readme_table.SOURCES)")
    p.add_argument("--out", help="merged JSON")
    p.add_argument("--chart", help="PNG (default: --out with .png)")
    p.add_argument("--title", default="Pagoda vs vLLM 0.26, same GPU, same run")
    p.add_argument("--readme", action="store_true", help="rewrite README.md's comparison with vLLM from the files")
    p.add_argument("--check", action="store_true", help="with --readme: only check that README.md is up to date")
    args = p.parse_args(argv)
    if args.readme:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import readme_table

        return readme_table.main(tuple(args.runs) or readme_table.SOURCES, check=args.check)
    if not args.runs or not args.out:
        p.error("give the run files and --out (or --readme)")
    merged = merge_runs([json.loads(Path(f).read_text()) for f in args.runs])
    Path(args.out).write_text(json.dumps(merged, indent=2) + "\n")
    print(format_table(merged["rows"]))
    chart(merged["rows"], Path(args.chart or Path(args.out).with_suffix(".png")), args.title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
