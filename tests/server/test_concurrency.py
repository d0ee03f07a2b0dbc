"""Many concurrent requests share one engine loop; disconnects free their KV blocks; /metrics counts."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from server_helpers import API_KEY, MODEL_NAME, metric, read_metrics
from tiny_models import random_prompts
from pagoda import LLM, SamplingParams

NUM_REQUESTS = 64
MAX_TOKENS = 16


def test_64_concurrent_greedy_requests_match_offline_generate(server, tiny_chat_model, async_client_factory):
    prompts = random_prompts(NUM_REQUESTS, range(4, 40), seed=11)
    texts = [" ".join(f"t{t}" for t in p) for p in prompts[::2]]  # half as text, half as token ids
    inputs = [texts[i // 2] if i % 2 == 0 else prompts[i] for i in range(NUM_REQUESTS)]
    before = read_metrics(server.url)

    async def run_all():
        client = async_client_factory()
        return await asyncio.gather(*(client.completions.create(
            model=MODEL_NAME, prompt=p, temperature=0, max_tokens=MAX_TOKENS) for p in inputs))

    results = asyncio.run(run_all())
    offline = LLM(model=tiny_chat_model, block_size=8).generate(
        inputs, SamplingParams(temperature=0, max_tokens=MAX_TOKENS), use_tqdm=False)
    assert [r.choices[0].text for r in results] == [o.outputs[0].text for o in offline]
    assert all(r.choices[0].finish_reason == "length" for r in results)

    after = read_metrics(server.url)
    delta = {name: metric(after, name) - metric(before, name) for name in (
        "pagoda:prompt_tokens_total", "pagoda:generation_tokens_total",
        "pagoda:time_to_first_token_seconds_count", "pagoda:e2e_request_latency_seconds_count",
        "pagoda:inter_token_latency_seconds_count")}
    assert delta["pagoda:prompt_tokens_total"] == sum(r.usage.prompt_tokens for r in results)
    assert delta["pagoda:generation_tokens_total"] == NUM_REQUESTS * MAX_TOKENS
    assert delta["pagoda:time_to_first_token_seconds_count"] == NUM_REQUESTS
    assert delta["pagoda:e2e_request_latency_seconds_count"] == NUM_REQUESTS
    assert delta["pagoda:inter_token_latency_seconds_count"] == NUM_REQUESTS * (MAX_TOKENS - 1)
    finished = (metric(after, "pagoda:request_success_total", finished_reason="length")
                - metric(before, "pagoda:request_success_total", finished_reason="length"))
    assert finished == NUM_REQUESTS
    assert metric(after, "pagoda:num_requests_running") == 0


def _engine_holds_no_blocks(server) -> bool:
    state = server.core_state()
    return state["num_free_blocks"] == state["num_blocks"] and state["num_unfinished"] == 0


def _wait_until_no_blocks_held(server) -> None:
    deadline = time.monotonic() + 10
    while not _engine_holds_no_blocks(server):
        assert time.monotonic() < deadline, "the aborted request still holds KV blocks"
        time.sleep(0.05)


def _wait_for_aborts(server, before: dict, expected: int) -> None:
    """The server notices a gone client asynchronously: wait (10 s at most) for the count."""
    deadline = time.monotonic() + 10
    while _aborted_since(server, before) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _aborted_since(server, before) == expected
    _wait_until_no_blocks_held(server)


def _aborted_since(server, before: dict) -> float:
    after = read_metrics(server.url)
    return (metric(after, "pagoda:request_success_total", finished_reason="abort")
            - metric(before, "pagoda:request_success_total", finished_reason="abort"))


def test_client_disconnect_aborts_and_frees_kv_blocks(server):
    server.set_step_delay(0.01)  # keep the request in flight while the client walks away
    before = read_metrics(server.url)
    body = {"model": MODEL_NAME, "prompt": "t60 t61", "max_tokens": 240, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=30,
                          headers={"Authorization": f"Bearer {API_KEY}"}) as response:
            lines = response.iter_lines()
            chunks = [next(lines) for _ in range(6)]  # a few chunks (blank separators included)
            assert any(c.startswith("data: {") for c in chunks)
            assert metric(read_metrics(server.url), "pagoda:kv_cache_usage_perc") > 0
        _wait_for_aborts(server, before, 1)
        with pytest.raises(httpx.ReadTimeout):  # a non-streaming request whose client gives up
            httpx.post(server.url + "/v1/completions", json={**body, "stream": False}, timeout=0.5,
                       headers={"Authorization": f"Bearer {API_KEY}"})
        _wait_for_aborts(server, before, 2)
    finally:
        server.set_step_delay(0.0)
    _assert_idle(server)


def test_cancel_before_the_first_token_aborts_and_frees_kv_blocks(server):
    server.set_step_delay(1.0)  # every step takes a second: the client gives up before any token
    before = read_metrics(server.url)
    body = {"model": MODEL_NAME, "prompt": "t60 t62", "max_tokens": 50, "temperature": 0, "stream": True}
    try:
        with pytest.raises(httpx.ReadTimeout):
            with httpx.stream("POST", server.url + "/v1/completions", json=body, timeout=httpx.Timeout(30, read=0.3),
                              headers={"Authorization": f"Bearer {API_KEY}"}) as response:
                assert response.status_code == 200
                next(line for line in response.iter_lines() if line.startswith("data: {"))
        _wait_for_aborts(server, before, 1)
    finally:
        server.set_step_delay(0.0)
    _assert_idle(server)


def _assert_idle(server) -> None:
    """No KV blocks in use, nothing running, nothing pending in the front end."""
    after = read_metrics(server.url)
    assert metric(after, "pagoda:kv_cache_usage_perc") == 0 and metric(after, "pagoda:num_requests_running") == 0
    assert server.engine.num_pending == 0
