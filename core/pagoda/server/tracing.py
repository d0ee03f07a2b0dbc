"""OpenTelemetry traces (``--otlp-traces-endpoint URL``, the ``pagoda[otel]`` extra): one span per engine
request, exported over OTLP/HTTP (protobuf), with the GenAI semantic conventions' attributes and vLLM's
latency attributes. The span's parent is the W3C trace context of the HTTP request (``traceparent``,
``tracestate``), which :class:`TraceContextMiddleware` keeps in a context variable for the request's task.
A span is made when its request ends, its start set back to the arrival: nothing per token."""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from pagoda.errors import ConfigError
from pagoda.server.request_record import RequestRecord

TRACE_HEADERS = (b"traceparent", b"tracestate")
CHAT_PATHS = ("/chat/", "/messages", "/responses")  # routes whose GenAI operation is "chat"
OTEL_EXTRA = "pip install 'pagoda[otel]' (opentelemetry-sdk and opentelemetry-exporter-otlp-proto-http)"


@dataclass(frozen=True)
class IncomingRequest:
    """What a span takes from the HTTP request that made it."""

    path: str
    trace_headers: dict[str, str]

    @property
    def operation(self) -> str:
        return "chat" if any(part in self.path for part in CHAT_PATHS) else "text_completion"


_incoming: contextvars.ContextVar[IncomingRequest | None] = contextvars.ContextVar("pagoda_incoming", default=None)


def incoming_request() -> IncomingRequest | None:
    """The HTTP request this task serves (None outside one, or without tracing)."""
    return _incoming.get()


class TraceContextMiddleware:
    """Plain ASGI middleware: keeps the request's path and trace headers for the spans of its engine requests."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode(): v.decode("latin-1") for k, v in scope.get("headers") or [] if k in TRACE_HEADERS}
        token = _incoming.set(IncomingRequest(scope["path"], headers))
        try:
            await self.app(scope, receive, send)
        finally:
            _incoming.reset(token)


def traces_url(endpoint: str) -> str:
    """The OTLP/HTTP traces URL of ``--otlp-traces-endpoint``: as given, or with ``/v1/traces`` added to a
    bare ``http://host:port``. ConfigError for anything else."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"--otlp-traces-endpoint {endpoint!r} is not an OTLP/HTTP URL; give the collector's HTTP "
                          "endpoint, such as http://localhost:4318/v1/traces (OTLP over gRPC is not supported)")
    return endpoint if parts.path.strip("/") else endpoint.rstrip("/") + "/v1/traces"


def check_tracing_installed() -> None:
    """ConfigError naming the extra when the OpenTelemetry SDK or its OTLP/HTTP exporter is missing."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f"--otlp-traces-endpoint needs the OpenTelemetry SDK ({exc.name} is missing): "
                          f"{OTEL_EXTRA}") from None


class RequestTracer:
    """Exports one span per finished request to an OTLP/HTTP collector (batched, in a background thread)."""

    def __init__(self, endpoint: str, service_name: str = "pagoda", export_delay_ms: int = 1000) -> None:
        check_tracing_installed()
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.url = traces_url(endpoint)
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=self.url),
                                                            schedule_delay_millis=export_delay_ms))
        self.tracer = self.provider.get_tracer("pagoda")
        self.propagator = TraceContextTextMapPropagator()
        self._kind, self._error = SpanKind.SERVER, Status(StatusCode.ERROR, "the engine could not run the request")

    def record(self, request: RequestRecord) -> None:
        """The span of one finished request (parent: its HTTP request's trace context, if any)."""
        parent = self.propagator.extract(request.trace_headers) if request.trace_headers else None
        wall = time.time_ns() - int(time.monotonic() * 1e9)  # monotonic -> wall-clock nanoseconds
        span = self.tracer.start_span(f"{request.operation} {request.model}", context=parent, kind=self._kind,
                                      start_time=wall + int(request.times.arrival_time * 1e9),
                                      attributes=span_attributes(request))
        if "error" in request.finish_reasons:
            span.set_status(self._error)
        span.end(end_time=wall + int(request.finished_time * 1e9))

    def flush(self, timeout_s: float = 10.0) -> bool:
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        """Export what is left, then stop the exporter thread."""
        self.provider.shutdown()



def span_attributes(request: RequestRecord) -> dict:
    """GenAI semantic conventions (gen_ai.*), plus vLLM's gen_ai.latency.* attributes in seconds."""
    params = request.params
    attributes = {
        "gen_ai.operation.name": request.operation,
        "gen_ai.request.model": request.model,
        "gen_ai.response.model": request.model,
        "gen_ai.request.id": request.request_id,
        "gen_ai.response.id": request.request_id,
        "gen_ai.request.temperature": params.temperature,
        "gen_ai.request.top_p": params.top_p,
        "gen_ai.request.choice.count": params.n,
        "gen_ai.usage.input_tokens": request.prompt_tokens,
        "gen_ai.usage.output_tokens": request.output_tokens,
        "gen_ai.response.finish_reasons": list(request.finish_reasons),
        "pagoda.engine": request.engine,
    }
    if params.max_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = params.max_tokens
    attributes.update({f"gen_ai.latency.{name}": value for name, value in request.latencies().items()})
    return attributes
