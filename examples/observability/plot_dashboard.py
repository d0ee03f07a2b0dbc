"""Draw the Grafana dashboard's main panels (grafana_dashboard.json) from a recorded run's scrapes
(record_run.py), with the dashboard's arithmetic: rates over a sliding window, quantiles interpolated
within histogram buckets as PromQL's histogram_quantile does.

    python examples/observability/plot_dashboard.py run.jsonl.gz docs/img/observability_cpu_tiny.png \\
        --title "tiny random Llama, 2-core CPU"
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict

from prometheus_client.parser import text_string_to_metric_families


def load(path: str, prefix: str = "pagoda") -> tuple[list[float], list[dict]]:
    """Each scrape's time (seconds from the first) and its samples summed over every label but ``le``:
    {(name, le or None): value}, names without the prefix."""
    times, scrapes = [], []
    with gzip.open(path, "rt") as f:
        for line in f:
            entry = json.loads(line)
            summed: dict[tuple[str, str | None], float] = defaultdict(float)
            for family in text_string_to_metric_families(entry["text"]):
                for s in family.samples:
                    if s.name.startswith(prefix + ":"):
                        summed[(s.name[len(prefix) + 1:], s.labels.get("le"))] += s.value
            times.append(entry["t"])
            scrapes.append(dict(summed))
    return [t - times[0] for t in times], scrapes


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """PromQL's histogram_quantile over cumulative ``(upper bound, count)`` pairs, +Inf last; None without data."""
    buckets = sorted(buckets)
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if upper == float("inf"):
                return lower  # the highest finite bound, as Prometheus answers
            return lower + (upper - lower) * (rank - below) / (count - below) if count > below else upper
        lower, below = upper, count
    return lower


class Series:
    """Windowed rates and quantiles over the scrapes (``window`` seconds, like Grafana's $__rate_interval)."""

    def __init__(self, times: list[float], scrapes: list[dict], window: float) -> None:
        self.times, self.scrapes, self.window = times, scrapes, window
        self.starts = [max((j for j, u in enumerate(times) if u <= t - window), default=0) for t in times]

    def _delta(self, i: int, key: tuple) -> float:
        return self.scrapes[i].get(key, 0.0) - self.scrapes[self.starts[i]].get(key, 0.0)

    def rate(self, name: str) -> list[float | None]:
        return [self._delta(i, (name, None)) / (t - self.times[self.starts[i]]) if i else None
                for i, t in enumerate(self.times)]

    def gauge(self, name: str) -> list[float]:
        return [s.get((name, None), 0.0) for s in self.scrapes]

    def mean(self, histogram: str) -> list[float | None]:
        out = []
        for i in range(len(self.times)):
            count = self._delta(i, (f"{histogram}_count", None))
            out.append(self._delta(i, (f"{histogram}_sum", None)) / count if count else None)
        return out

    def quantile(self, histogram: str, q: float) -> list[float | None]:
        bounds = sorted({le for (name, le) in self.scrapes[-1] if name == f"{histogram}_bucket"}, key=float)
        return [histogram_quantile(q, [(float(le), self._delta(i, (f"{histogram}_bucket", le))) for le in bounds])
                for i in range(len(self.times))]


def panels(series: Series) -> list[tuple[str, str, dict[str, list]]]:
    """(title, unit, {legend: values}) of each panel drawn, in the dashboard's order."""
    quantiles = lambda h: {f"p{int(q * 100)}": series.quantile(h, q) for q in (0.5, 0.9, 0.99)}  # noqa: E731
    return [
        ("E2E request latency", "s", quantiles("e2e_request_latency_seconds")),
        ("Time to first token", "s", quantiles("time_to_first_token_seconds")),
        ("Inter-token latency", "s", quantiles("inter_token_latency_seconds")),
        ("Token throughput", "tokens/s", {"prompt": series.rate("prompt_tokens_total"),
                                          "generation": series.rate("generation_tokens_total")}),
        ("Scheduler state", "sequences", {"running": series.gauge("num_requests_running"),
                                          "waiting": series.gauge("num_requests_waiting")}),
        ("KV cache usage", "fraction", {"used": series.gauge("kv_cache_usage_perc")}),
        ("Request phases (mean)", "s", {p: series.mean(f"request_{p}_time_seconds") for p in ("queue", "prefill", "decode")}),
        ("Finished requests", "per s", {"e2e count": series.rate("e2e_request_latency_seconds_count"),
                                        "preemptions": series.rate("num_preemptions_total")}),
    ]


def draw(path: str, times: list[float], drawn: list, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(18, 7.5), constrained_layout=True)
    for ax, (name, unit, lines) in zip(axes.flat, drawn):
        for legend, values in lines.items():
            points = [(t, v) for t, v in zip(times, values) if v is not None]
            ax.plot([t for t, _ in points], [v for _, v in points], label=legend, linewidth=1.2)
        ax.set_title(name, fontsize=11)
        ax.set_ylabel(unit)
        ax.set_xlabel("seconds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=12)
    fig.savefig(path, dpi=90)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scrapes", help="record_run.py's output")
    p.add_argument("png")
    p.add_argument("--title", default="Pagoda: a recorded run")
    p.add_argument("--window", type=float, default=10.0, help="seconds of the rate window")
    p.add_argument("--prefix", default="pagoda")
    args = p.parse_args()
    times, scrapes = load(args.scrapes, args.prefix)
    draw(args.png, times, panels(Series(times, scrapes, args.window)), args.title)


if __name__ == "__main__":
    main()
