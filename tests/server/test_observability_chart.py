"""examples/observability/plot_dashboard.py: PromQL's histogram_quantile and windowed rates on known numbers, and
the recorded run in the repository draws (the chart of docs/observability.md)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "observability"
sys.path.insert(0, str(EXAMPLES))
from plot_dashboard import Series, draw, histogram_quantile, load, panels  # noqa: E402

INF = float("inf")


def test_histogram_quantile_interpolates_as_prometheus():
    buckets = [(0.1, 2.0), (0.5, 6.0), (1.0, 10.0), (INF, 10.0)]  # cumulative counts
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.4 * (5 - 2) / 4)
    assert histogram_quantile(0.1, buckets) == pytest.approx(0.05)  # the first bucket starts at 0
    assert histogram_quantile(0.99, [(1.0, 1.0), (2.0, 1.0), (INF, 4.0)]) == 2.0  # in +Inf: the last finite bound
    assert histogram_quantile(0.5, [(1.0, 0.0), (INF, 0.0)]) is None


def _scrape(t: float, requests: int, latency_sum: float, le_half: int) -> dict:
    text = "\n".join([
        "# TYPE pagoda:e2e_request_latency_seconds histogram",
        f'pagoda:e2e_request_latency_seconds_bucket{{model_name="m",engine="0",le="0.5"}} {le_half}',
        f'pagoda:e2e_request_latency_seconds_bucket{{model_name="m",engine="0",le="+Inf"}} {requests}',
        f'pagoda:e2e_request_latency_seconds_sum{{model_name="m",engine="0"}} {latency_sum}',
        f'pagoda:e2e_request_latency_seconds_count{{model_name="m",engine="0"}} {requests}',
        "# TYPE pagoda:generation_tokens_total counter",
        f'pagoda:generation_tokens_total{{model_name="m",engine="0"}} {requests * 10}',
        f'pagoda:generation_tokens_total{{model_name="a",engine="1"}} {requests * 5}', ""])
    return {"t": t, "text": text}


def test_rates_means_and_quantiles_over_a_window(tmp_path):
    path = tmp_path / "run.jsonl.gz"
    with gzip.open(path, "wt") as f:
        for entry in (_scrape(100.0, 0, 0.0, 0), _scrape(102.0, 4, 1.0, 4), _scrape(104.0, 8, 5.0, 4)):
            f.write(json.dumps(entry) + "\n")
    times, scrapes = load(str(path))
    assert times == [0.0, 2.0, 4.0]
    series = Series(times, scrapes, window=2.0)
    assert series.rate("generation_tokens_total") == [None, 30.0, 30.0]  # summed over every label
    assert series.mean("e2e_request_latency_seconds") == [None, 0.25, 1.0]
    assert series.quantile("e2e_request_latency_seconds", 0.5)[1] == pytest.approx(0.25)
    assert series.quantile("e2e_request_latency_seconds", 0.5)[2] == 0.5  # all four in +Inf: the last finite bound


def test_the_recorded_run_draws(tmp_path):
    times, scrapes = load(str(EXAMPLES / "recorded" / "cpu_tiny_run.jsonl.gz"))
    drawn = panels(Series(times, scrapes, 10.0))
    assert len(drawn) == 8 and max(v for v in drawn[3][2]["generation"] if v is not None) > 0
    draw(str(tmp_path / "chart.png"), times, drawn, "recorded run")
    assert (tmp_path / "chart.png").stat().st_size > 10_000
