"""OpenTelemetry traces through the real exporter (OTLP/HTTP protobuf) into a receiver in the test process: one
span per engine request, its parent the request's ``traceparent``, the GenAI attributes equal to what the
response reported, the latencies consistent with the span's own start and end."""

from __future__ import annotations

import json

import httpx
import pytest

from otlp_receiver import OTLPReceiver
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server

pytest.importorskip("opentelemetry.sdk.trace", reason="needs pagoda[otel]")

from pagoda.server.tracing import RequestTracer  # noqa: E402

AUTH = {"Authorization": f"Bearer {API_KEY}"}
TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
SERVER_KIND = 2  # opentelemetry.proto's SPAN_KIND_SERVER


@pytest.fixture(scope="module")
def traced(tiny_chat_model):
    with OTLPReceiver() as receiver:
        tracer = RequestTracer(receiver.url, export_delay_ms=100)
        running = start_server(engine_config(tiny_chat_model), observers={"tracer": tracer})
        try:
            yield running, receiver
        finally:
            running.stop()


def _post(url: str, path: str, body: dict, headers: dict | None = None) -> dict:
    reply = httpx.post(url + path, json=body, headers={**AUTH, **(headers or {})}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_one_span_per_request_with_its_parent_and_attributes(traced):
    running, receiver = traced
    parent = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01", "tracestate": "vendor=value"}
    completion = _post(running.url, "/v1/completions", {"model": MODEL_NAME, "prompt": "t5 t6 t7", "max_tokens": 5,
                                                        "ignore_eos": True, "temperature": 0.5, "top_p": 0.9}, parent)
    chat = _post(running.url, "/v1/chat/completions", {"model": MODEL_NAME, "max_tokens": 3, "ignore_eos": True,
                                                       "messages": [{"role": "user", "content": "t9"}]})
    two = _post(running.url, "/v1/completions", {"model": MODEL_NAME, "prompt": ["t1 t2", "t3"], "max_tokens": 2,
                                                 "ignore_eos": True}, parent)
    running.engine.observers.tracer.flush()
    spans = receiver.wait_for(4)
    assert len(spans) == 4, spans
    first = next(s for s in spans if s.attributes["gen_ai.request.id"].startswith(completion["id"]))
    assert (first.trace_id, first.parent_span_id, first.kind) == (TRACE_ID, PARENT_ID, SERVER_KIND)
    assert first.name == f"text_completion {MODEL_NAME}" and first.service == "pagoda"
    a = first.attributes
    assert a["gen_ai.operation.name"] == "text_completion" and a["gen_ai.request.model"] == MODEL_NAME
    assert a["gen_ai.usage.input_tokens"] == completion["usage"]["prompt_tokens"]
    assert a["gen_ai.usage.output_tokens"] == completion["usage"]["completion_tokens"] == 5
    assert a["gen_ai.response.finish_reasons"] == ["length"]
    assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.temperature"], a["gen_ai.request.top_p"]) == (5, 0.5, 0.9)
    _check_latencies(first)
    chat_span = next(s for s in spans if s.attributes["gen_ai.operation.name"] == "chat")
    assert chat_span.parent_span_id == "" and chat_span.trace_id != TRACE_ID  # no traceparent: a root span
    assert chat_span.attributes["gen_ai.usage.output_tokens"] == chat["usage"]["completion_tokens"] == 3
    prompts = [s for s in spans if s.attributes["gen_ai.request.id"].startswith(two["id"])]
    assert len(prompts) == 2 and {s.parent_span_id for s in prompts} == {PARENT_ID}  # one span per prompt


def _check_latencies(span) -> None:
    """The phases are positive, nest inside each other, and e2e is the span's duration."""
    a = {k.removeprefix("gen_ai.latency."): v for k, v in span.attributes.items() if k.startswith("gen_ai.latency.")}
    assert set(a) == {"time_to_first_token", "time_in_queue", "e2e", "time_in_model_prefill", "time_in_model_decode",
                      "time_in_model_inference"}
    assert all(v >= 0 for v in a.values()), a
    assert a["e2e"] == pytest.approx(span.seconds, abs=2e-3)
    assert a["time_in_queue"] + a["time_in_model_prefill"] <= a["time_to_first_token"] <= a["e2e"]
    assert a["time_in_model_inference"] == pytest.approx(a["time_in_model_prefill"] + a["time_in_model_decode"])


def test_an_aborted_stream_has_a_span_with_finish_reason_abort(traced):
    running, receiver = traced
    seen = len(receiver.spans)
    running.set_step_delay(0.02)
    try:
        body = {"model": MODEL_NAME, "prompt": "t40", "max_tokens": 200, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", running.url + "/v1/completions", json=body, headers=AUTH, timeout=60) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    request_id = json.loads(line[6:])["id"]
                    break
        spans = receiver.wait_for(seen + 1)
    finally:
        running.set_step_delay(0.0)
    span = next(s for s in spans[seen:] if s.attributes["gen_ai.request.id"].startswith(request_id))
    assert span.attributes["gen_ai.response.finish_reasons"] == ["abort"]
    assert 1 <= span.attributes["gen_ai.usage.output_tokens"] < 200 and span.status_code == 0
