"""`pagoda serve`'s observability flags: metric names, traces, request logs (docs/observability.md)."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from pagoda.errors import ConfigError
from pagoda.server.tracing import check_tracing_installed, traces_url

METRIC_PREFIX = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


@dataclass(frozen=True)
class ObservabilityConfig:
    metrics_name_prefix: str = "pagoda"  # /metrics names are PREFIX:name ("vllm": vLLM's dashboards work as they are)
    otlp_traces_endpoint: str | None = None  # OTLP/HTTP collector: one span per request
    log_requests: bool = False  # a log line when a request reaches the engine and when it ends
    log_request_prompts: bool = False  # with them, the prompt text and token ids


def add_observability_args(g) -> None:
    g.add_argument("--metrics-name-prefix", default="pagoda", metavar="PREFIX",
                   help="/metrics names are PREFIX:name (default pagoda); 'vllm' gives vLLM's names, so dashboards "
                        "and alerts written for vLLM work unchanged")
    g.add_argument("--otlp-traces-endpoint", default=None, metavar="URL",
                   help="export an OpenTelemetry span per request to this OTLP/HTTP collector "
                        "(e.g. http://localhost:4318/v1/traces), its parent taken from the request's traceparent "
                        "header; needs pip install 'pagoda[otel]'")
    g.add_argument("--log-requests", action="store_true",
                   help="log a line when each request reaches the engine and when it ends (sizes, parameters, finish "
                        "reasons, latencies; prompts left out). Off by default")
    g.add_argument("--log-request-prompts", action="store_true",
                   help="with --log-requests: include each prompt's text and token ids (they may hold personal data)")


def observability_config(args: argparse.Namespace) -> ObservabilityConfig:
    """The flags, checked: ConfigError naming the flag and the fix."""
    prefix = args.metrics_name_prefix
    if not METRIC_PREFIX.fullmatch(prefix):
        raise ConfigError(f"--metrics-name-prefix {prefix!r} is not a Prometheus name: use letters, digits and "
                          "underscores, not starting with a digit (e.g. pagoda or vllm)")
    if args.otlp_traces_endpoint is not None:
        traces_url(args.otlp_traces_endpoint)
        check_tracing_installed()
    if args.log_request_prompts and not args.log_requests:
        raise ConfigError("--log-request-prompts needs --log-requests")
    return ObservabilityConfig(prefix, args.otlp_traces_endpoint, args.log_requests, args.log_request_prompts)
