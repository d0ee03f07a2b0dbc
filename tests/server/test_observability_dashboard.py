"""The Grafana dashboard and the Prometheus alert rules of examples/observability/: every series their PromQL
names, and every label they group or match by, is in a scrape of a running server, under the ``pagoda`` prefix
and under ``vllm`` (``--metrics-name-prefix vllm``), where the series vLLM's own reference dashboard queries
are there too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from metrics_scrape import complete, scrape
from server_helpers import API_KEY, MODEL_NAME

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "observability"
FUNCTIONS = {"sum", "avg", "min", "max", "count", "topk", "bottomk", "quantile", "rate", "irate", "increase",
             "histogram_quantile", "abs", "clamp_min", "clamp_max", "absent", "vector", "scalar", "label_values",
             "avg_over_time", "max_over_time", "min_over_time", "delta", "deriv", "time"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
FROM_PROMETHEUS = {"up"}  # series Prometheus makes itself for each target
TARGET_LABELS = {"instance", "job"}  # labels Prometheus adds to every scraped series
# What vLLM's reference Grafana dashboard (examples/observability/prometheus_grafana/grafana.json) queries
VLLM_DASHBOARD = {"vllm:e2e_request_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_sum",
                  "vllm:e2e_request_latency_seconds_count", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                  "vllm:inter_token_latency_seconds_bucket", "vllm:inter_token_latency_seconds_sum",
                  "vllm:inter_token_latency_seconds_count", "vllm:num_requests_running", "vllm:num_requests_waiting",
                  "vllm:time_to_first_token_seconds_bucket", "vllm:time_to_first_token_seconds_sum",
                  "vllm:time_to_first_token_seconds_count", "vllm:kv_cache_usage_perc",
                  "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_bucket",
                  "vllm:request_success_total", "vllm:request_queue_time_seconds_sum",
                  "vllm:request_prefill_time_seconds_sum", "vllm:request_decode_time_seconds_sum",
                  "vllm:request_max_num_generation_tokens_sum", "vllm:time_per_output_token_seconds_bucket"}


def dashboard_queries() -> list[str]:
    board = json.loads((EXAMPLES / "grafana_dashboard.json").read_text())
    queries = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    queries += [v["query"]["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"]) and len(queries) > 20
    return queries


def alert_queries() -> list[str]:
    rules = [r for group in yaml.safe_load((EXAMPLES / "prometheus_alerts.yaml").read_text())["groups"]
             for r in group["rules"]]
    assert all(r["alert"] and r["annotations"]["summary"] for r in rules) and len(rules) >= 6
    return [r["expr"] for r in rules]


def series_and_labels(query: str, prefix: str) -> tuple[set[str], set[str]]:
    """The series a PromQL query (or Grafana's label_values) names, and the labels it groups or matches by."""
    query = query.replace("${metric_prefix}", prefix)
    query = re.sub(r'"(?:[^"\\]|\\.)*"', '""', query)  # string literals
    labels = set(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", " ".join(re.findall(r"\{[^}]*\}", query))))
    query = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", query)  # label matchers, ranges
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", query):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    query = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", query)
    values_of = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query)  # Grafana's variable query
    if values_of:
        query, label = values_of.groups()
        labels.add(label)
    names = set(re.findall(r"[a-zA-Z_:][\w:]*", query)) - FUNCTIONS - KEYWORDS
    return names, labels


def check_queries(queries: list[str], prefix: str, samples: dict) -> None:
    exported = {name for name, _ in samples}
    labels_of: dict[str, set[str]] = {}
    for name, labels in samples:
        labels_of.setdefault(name, set()).update(k for k, _ in labels)
    for query in queries:
        names, labels = series_and_labels(query, prefix)
        assert names, query
        assert names <= exported | FROM_PROMETHEUS, (query, names - exported)
        known = set().union(*(labels_of.get(n, set()) for n in names)) | TARGET_LABELS | {"le"}
        assert labels <= known, (query, labels - known)


@pytest.fixture
def scrapes(server):
    """A scrape of the running server with its default prefix, and one with the prefix vllm."""
    complete(server.url, {"Authorization": f"Bearer {API_KEY}"}, {"model": MODEL_NAME, "prompt": "t7", "max_tokens": 2})
    metrics = server.engine.metrics
    pagoda = scrape(server.url)
    metrics.prefix = "vllm"
    try:
        vllm = scrape(server.url)
    finally:
        metrics.prefix = "pagoda"
    return pagoda, vllm


def test_every_dashboard_and_alert_query_resolves(scrapes):
    pagoda, vllm = scrapes
    for prefix, samples in (("pagoda", pagoda), ("vllm", vllm)):
        check_queries(dashboard_queries(), prefix, samples)
    check_queries(alert_queries(), "pagoda", pagoda)
    check_queries([q.replace("pagoda:", "vllm:") for q in alert_queries()], "vllm", vllm)


def test_vllm_dashboards_find_their_series(scrapes):
    _, vllm = scrapes
    assert VLLM_DASHBOARD <= {name for name, _ in vllm}
    assert not [name for name, _ in vllm if not name.startswith("vllm:")]


def test_the_query_parser_finds_names_and_labels():
    """The checker itself: a misspelt series or label is seen (else every query would pass)."""
    names, labels = series_and_labels('sum by(le, engine) (rate(${metric_prefix}:e2e_x_bucket{model_name=~"$m"}'
                                      '[$__rate_interval])) / on(instance) pagoda:y', "pagoda")
    assert names == {"pagoda:e2e_x_bucket", "pagoda:y"} and labels == {"le", "engine", "model_name", "instance"}
    with pytest.raises(AssertionError):
        check_queries(["rate(pagoda:no_such_series[5m])"], "pagoda", {("pagoda:other", ()): 1.0})
