"""--request-timeout: a request still running after it is aborted in the engine (its KV blocks
freed) and answered 504 (a stream: an error event, then [DONE]); requests within it are untouched."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from server_helpers import API_KEY, MODEL_NAME, metric, read_metrics
from serve_process import start_serve, stop

AUTH = {"Authorization": f"Bearer {API_KEY}"}
LONG = {"model": MODEL_NAME, "prompt": "t40 t41", "max_tokens": 200, "temperature": 0}
TIMEOUT_S = 0.5  # 200 steps of >= 20 ms each take 4 s at least


@pytest.fixture
def timed_out_server(server):
    """The shared server with a 0.5 s request timeout and slowed-down steps, restored afterwards."""
    server.engine.request_timeout = TIMEOUT_S
    server.set_step_delay(0.02)
    try:
        yield server
    finally:
        server.engine.request_timeout = None
        server.set_step_delay(0.0)


def _aborted(url: str) -> float:
    return metric(read_metrics(url), "pagoda:request_success_total", finished_reason="abort")


def _wait_until_idle(server) -> None:
    """The gauges come with the core's outputs and every 0.5 s: poll them (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        values = read_metrics(server.url)
        idle = metric(values, "pagoda:kv_cache_usage_perc") == 0 and metric(values, "pagoda:num_requests_running") == 0
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert idle, values
    state = server.core_state()
    assert state["num_free_blocks"] == state["num_blocks"] and state["num_unfinished"] == 0
    assert server.engine.num_pending == 0


def test_a_request_past_the_timeout_is_504_and_frees_its_blocks(timed_out_server):
    server = timed_out_server
    before = _aborted(server.url)
    started = time.monotonic()
    response = httpx.post(server.url + "/v1/completions", json=LONG, headers=AUTH, timeout=60)
    assert time.monotonic() - started < 3.5  # stopped at the timeout, not after 200 tokens
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert error["code"] == "request_timeout" and error["type"] == "timeout_error"
    assert "--request-timeout" in error["message"] and "0.5 s" in error["message"]
    _wait_until_idle(server)
    assert _aborted(server.url) - before == 1
    short = httpx.post(server.url + "/v1/completions", json={**LONG, "max_tokens": 2}, headers=AUTH, timeout=60)
    assert short.status_code == 200 and short.json()["choices"][0]["finish_reason"] == "length"


def test_a_stream_past_the_timeout_ends_with_an_error_event(timed_out_server):
    server = timed_out_server
    events = []
    with httpx.stream("POST", server.url + "/v1/chat/completions", headers=AUTH, timeout=60, json={
            "model": MODEL_NAME, "messages": [{"role": "user", "content": "t40"}], "max_tokens": 200, "stream": True}) as response:
        assert response.status_code == 200  # the stream had started: the error comes in-band
        events = [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["code"] == "request_timeout" and "--request-timeout" in error["message"]
    tokens = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert 0 < len(tokens) < 200 and all(tokens)
    _wait_until_idle(server)


def test_the_openai_client_raises_on_both_paths(timed_out_server, client):
    with pytest.raises(openai.APIStatusError) as info:
        client.with_options(max_retries=0).completions.create(**LONG)
    assert info.value.status_code == 504 and "--request-timeout" in info.value.message
    with pytest.raises(openai.APIError, match="--request-timeout"):
        for _ in client.completions.create(stream=True, **LONG):
            pass
    _wait_until_idle(timed_out_server)


def test_the_serve_flag_sets_the_timeout(tiny_chat_model, tmp_path):
    """End to end: `pagoda serve --request-timeout` (steps slowed to >= 20 ms) answers 504."""
    proc, url, log = start_serve(tiny_chat_model, tmp_path, "--request-timeout", "0.3")
    try:
        response = httpx.post(url + "/v1/completions", timeout=60, json={**LONG, "model": "tiny"})
        assert response.status_code == 504 and "0.3 s" in response.json()["error"]["message"], response.text
        assert httpx.post(url + "/v1/completions", timeout=60, json={**LONG, "model": "tiny", "max_tokens": 2}).status_code == 200
    finally:
        stop(proc, log)
