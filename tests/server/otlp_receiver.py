"""An OTLP/HTTP trace receiver in the test process: a loopback HTTP server that takes what a real
exporter posts to ``/v1/traces`` (protobuf ``ExportTraceServiceRequest``) and keeps the spans."""

from __future__ import annotations

import gzip
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class ReceivedSpan:
    name: str
    trace_id: str  # hex
    span_id: str
    parent_span_id: str  # "" for a root span
    kind: int  # the protobuf enum: 2 = SERVER
    start_ns: int
    end_ns: int
    attributes: dict
    status_code: int  # 0 unset, 2 error
    service: str

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


def _value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind)


def _spans(body: bytes) -> list[ReceivedSpan]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest.FromString(body)
    spans = []
    for resource in request.resource_spans:
        service = {a.key: _value(a.value) for a in resource.resource.attributes}.get("service.name", "")
        for scope in resource.scope_spans:
            for s in scope.spans:
                spans.append(ReceivedSpan(s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(), s.kind,
                                          s.start_time_unix_nano, s.end_time_unix_nano,
                                          {a.key: _value(a.value) for a in s.attributes}, s.status.code, service))
    return spans


class OTLPReceiver:
    """``with OTLPReceiver() as receiver:`` -> ``receiver.url`` (give it to the tracer), ``receiver.spans``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces" and self.headers.get("Content-Type") == "application/x-protobuf"
                if ok:
                    receiver.spans += _spans(body)
                    receiver.posts += 1
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "OTLPReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, count: int, timeout: float = 20.0) -> list[ReceivedSpan]:
        deadline = time.monotonic() + timeout
        while len(self.spans) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.spans)
