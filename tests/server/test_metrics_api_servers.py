"""`pagoda serve --api-server-count 2 --data-parallel-size 2` (a real subprocess: two HTTP processes sharing the
port, two engine cores): whichever process answers a scrape, /metrics counts every request exactly once, over
both processes and both cores (summed over the ``engine`` label); ``--otlp-traces-endpoint`` exports exactly one
span per request from both processes; ``--log-requests --log-format json`` writes a JSON line per request
received and finished, prompts left out."""

from __future__ import annotations

import json
import re
import threading

import httpx
import pytest

from metrics_scrape import Sent, complete, scrape, total, wait_until
from otlp_receiver import OTLPReceiver
from serve_process import start_serve, stop

pytest.importorskip("opentelemetry.sdk.trace", reason="needs pagoda[otel]")

ROUND = 8  # requests sent at once
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"


def _send_round(url: str, first: int) -> list[Sent]:
    """ROUND requests at once, each on its own connection (so both processes take some), half of them streamed;
    request ``first + i`` has span ``first + i + 1`` of TRACE_ID as its parent."""
    sent: list[Sent] = []

    def one(i: int) -> None:
        body = {"model": "tiny", "prompt": f"t{i + 5} t{i + 40} t{i + 90}", "max_tokens": 6 + i % ROUND,
                "ignore_eos": True, "temperature": 0, "stream": i % 2 == 1}
        sent.append(complete(url, {"traceparent": f"00-{TRACE_ID}-{i + 1:016x}-01"}, body))

    threads = [threading.Thread(target=one, args=(first + i,)) for i in range(ROUND)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(sent) == ROUND
    return sent


def _finished_lines(log: list[str]) -> list[dict]:
    entries = (json.loads(line) for line in "".join(log).splitlines() if line.startswith("{"))
    return [e for e in entries if e.get("event") == "finished"]


def _served_by(log: list[str], count: int) -> set[str]:
    """The API server processes that logged the ``count`` requests finished so far (once all are logged)."""
    wait_until(lambda: len(_finished_lines(log)) == count)
    return {e["source"] for e in _finished_lines(log)}


def _expected(sent: list[Sent]) -> dict[str, float]:
    return {"pagoda:request_success_total": len(sent), "pagoda:e2e_request_latency_seconds_count": len(sent),
            "pagoda:request_queue_time_seconds_count": len(sent),
            "pagoda:prompt_tokens_total": sum(s.prompt_tokens for s in sent),
            "pagoda:generation_tokens_total": sum(s.completion_tokens for s in sent),
            "pagoda:inter_token_latency_seconds_count": sum(s.completion_tokens - 1 for s in sent)}


def _counted(url: str) -> dict[str, float]:
    """One scrape's totals of the ``_expected`` series, and its e2e counts by engine core ("engine 0", "engine 1")."""
    samples = scrape(url)
    counted = {name: total(samples, name) for name in _expected([])}
    for d in (0, 1):
        counted[f"engine {d}"] = total(samples, "pagoda:e2e_request_latency_seconds_count", engine=str(d))
    return counted


def _complete(counted: dict[str, float], expected: dict[str, float]) -> bool:
    """Every request counted once, and both engine cores ran some."""
    by_engine = [counted.pop(f"engine {d}") for d in (0, 1)]
    return counted == expected and sum(by_engine) == expected["pagoda:e2e_request_latency_seconds_count"] \
        and min(by_engine) > 0


def test_two_api_servers_and_two_cores_count_trace_and_log_each_request_once(tiny_chat_model, tmp_path):
    with OTLPReceiver() as receiver:
        proc, url, log = start_serve(tiny_chat_model, tmp_path, "--api-server-count", "2", "--data-parallel-size", "2",
                                     "--otlp-traces-endpoint", receiver.url, "--log-requests", "--log-format", "json")
        try:
            sent = _send_round(url, 0)
            while _served_by(log, len(sent)) != {"api0", "api1"} and len(sent) < 4 * ROUND:  # as the kernel spread them
                sent += _send_round(url, len(sent))
            assert _served_by(log, len(sent)) == {"api0", "api1"}
            expected = _expected(sent)
            # each process reports its counts every second: within a few, every process's scrape shows all (eight
            # scrapes on new connections in a row agree, so both processes answered some of them); every check is
            # of one scrape, as one process answering before it has the other's latest report may show fewer
            wait_until(lambda: all(_complete(_counted(url), expected) for _ in range(8)), timeout=20,
                       message=f"{_counted(url)} != {expected}")
            spans = receiver.wait_for(len(sent))
        finally:
            stop(proc, log)
    _check_spans(spans, sent)
    _check_request_logs(log, len(sent))


def _check_spans(spans, sent: list[Sent]) -> None:
    assert len(spans) == len(sent), [s.attributes["gen_ai.request.id"] for s in spans]
    assert {s.trace_id for s in spans} == {TRACE_ID}
    assert sorted(int(s.parent_span_id, 16) for s in spans) == list(range(1, len(sent) + 1))
    assert sorted(s.attributes["gen_ai.usage.output_tokens"] for s in spans) == sorted(s.completion_tokens for s in sent)


def _check_request_logs(log: list[str], count: int) -> None:
    """Every process logged JSON objects (no text-format line); each request has a received and a finished line."""
    lines = "".join(log).splitlines()
    assert not [line for line in lines if re.match(r"(DEBUG|INFO|WARNING|ERROR) \d\d:\d\d:\d\d ", line)]
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert {e["logger"] for e in entries} >= {"pagoda.server", "pagoda.requests"}
    requests = [e for e in entries if e["logger"] == "pagoda.requests"]
    received = [e for e in requests if e["event"] == "received"]
    finished = [e for e in requests if e["event"] == "finished"]
    assert len(received) == len(finished) == count
    assert {e["request_id"] for e in received} == {e["request_id"] for e in finished}
    assert {e["source"] for e in requests} <= {"api0", "api1"}
    assert all("prompt" not in e and "prompt_token_ids" not in e for e in received)  # redacted by default
    assert all(e["finish_reasons"] == ["length"] and e["e2e_s"] > 0 for e in finished)
