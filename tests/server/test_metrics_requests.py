"""/metrics after a mixed set of requests (streamed and not, completions and chat, n = 2, stopped by length and
by a stop string, one aborted mid-stream, two refused by validation), read with prometheus_client's parser:
every request series counts exactly what was sent, and the phases add up (queue + prefill + decode is the
end-to-end latency less the hop to the engine core; inference = prefill + decode)."""

from __future__ import annotations

import httpx
import pytest

from metrics_scrape import Sent, complete, delta, scrape, total, wait_until
from server_helpers import API_KEY, MODEL_NAME

AUTH = {"Authorization": f"Bearer {API_KEY}"}
STEP_DELAY_S = 0.01  # each token takes at least this long: the phases are well above the clock's noise
HISTOGRAMS = ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prefill_time_seconds", "request_decode_time_seconds", "request_inference_time_seconds",
              "request_prompt_tokens", "request_generation_tokens", "request_max_num_generation_tokens",
              "request_params_n", "request_params_max_tokens")


def _body(prompt: str, max_tokens: int, **extra) -> dict:
    return {"model": MODEL_NAME, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            **extra}


def _stop_string(url: str, prompt: str) -> str:
    """A stop string the greedy output of ``prompt`` reaches: its fourth word (with the spaces around it)."""
    text = complete_text(url, _body(prompt, 8))
    return f" {text.split()[3]} "


def complete_text(url: str, body: dict) -> str:
    reply = httpx.post(url + "/v1/completions", json=body, headers=AUTH, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()["choices"][0]["text"]


def _completed_requests(url: str) -> list[Sent]:
    stop = _stop_string(url, "t10 t11 t12")
    chat = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "t20 t21"}], "max_tokens": 4,
            "temperature": 0, "ignore_eos": True, "stream": True}
    sent = [complete(url, AUTH, _body("t5 t6 t7", 6)),
            complete(url, AUTH, _body("t8 t9", 5, stream=True)),
            complete(url, AUTH, _body("t10 t11 t12", 8, stop=[stop])),
            complete(url, AUTH, _body("t10 t11 t12", 8, stop=[stop], stream=True)),
            complete(url, AUTH, _body("t30 t31 t32 t33", 3, n=2, temperature=1.0, seed=3)),
            complete(url, AUTH, chat, path="/v1/chat/completions")]
    assert [s.reasons for s in sent] == [["length"], ["length"], ["stop"], ["stop"], ["length", "length"], ["length"]]
    return sent


def _abort_a_stream(url: str) -> None:
    """A stream dropped after its first chunk (the server aborts it in the engine)."""
    with httpx.stream("POST", url + "/v1/completions", json=_body("t5 t6 t7", 200, stream=True), headers=AUTH,
                      timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: {"):
                break


def _check_counts(after: dict, before: dict, sent: list[Sent], aborted: int) -> None:
    """Every request series against what was sent (``aborted`` requests ended by abort, prompts as sent[0]'s)."""
    d = lambda name, **labels: delta(after, before, f"pagoda:{name}", **labels)  # noqa: E731
    requests = len(sent) + aborted
    assert d("request_success_total", finished_reason="length") == sum(s.reasons.count("length") for s in sent)
    assert d("request_success_total", finished_reason="stop") == sum(s.reasons.count("stop") for s in sent)
    assert d("request_success_total", finished_reason="abort") == aborted
    assert d("request_success_total", finished_reason="error") == 0
    for name in HISTOGRAMS:
        assert d(f"{name}_count") == requests, name
    assert d("prompt_tokens_total") == sum(s.prompt_tokens for s in sent) + aborted * sent[0].prompt_tokens
    assert d("request_prompt_tokens_sum") == d("prompt_tokens_total")
    completed_tokens = sum(s.completion_tokens for s in sent)
    aborted_tokens = d("request_generation_tokens_sum") - completed_tokens
    assert aborted_tokens >= aborted  # each aborted stream sent a token before it was dropped
    assert d("generation_tokens_total") == completed_tokens + aborted_tokens
    assert d("request_params_n_sum") == sum(s.n for s in sent) + aborted
    assert d("request_params_max_tokens_sum") == sum(s.max_tokens for s in sent) + aborted * 200
    longest = d("request_max_num_generation_tokens_sum")
    assert longest == sum(s.longest for s in sent) + aborted_tokens
    # one gap per token of a request's longest sequence after its first (an n = 2 request's sequences may run a
    # step apart: their tokens are one stream)
    assert d("inter_token_latency_seconds_count") == longest - requests
    assert d("time_per_output_token_seconds_count") == d("inter_token_latency_seconds_count")
    # every completed request made 2 tokens or more (an aborted one may have made only 1)
    assert requests - aborted <= d("request_time_per_output_token_seconds_count") <= requests


def _check_phases(after: dict, before: dict, requests: int) -> None:
    """Sums over completed requests: queue + prefill + decode = e2e less the hop from the API server to the core
    (per request well under 30 ms on a loaded CI machine); inference = prefill + decode; TTFT >= queue + prefill."""
    s = {name: delta(after, before, f"pagoda:request_{name}_time_seconds_sum")
         for name in ("queue", "prefill", "decode", "inference")}
    e2e = delta(after, before, "pagoda:e2e_request_latency_seconds_sum")
    ttft = delta(after, before, "pagoda:time_to_first_token_seconds_sum")
    assert s["decode"] > requests * STEP_DELAY_S  # every request made several tokens
    assert s["inference"] == pytest.approx(s["prefill"] + s["decode"], rel=1e-9)
    assert 0 <= e2e - (s["queue"] + s["prefill"] + s["decode"]) <= 0.03 * requests, (e2e, s)
    assert s["queue"] + s["prefill"] <= ttft <= s["queue"] + s["prefill"] + 0.03 * requests


def test_a_mixed_set_of_requests_is_counted_exactly(server):
    wait_until(lambda: server.engine.num_pending == 0)
    server.set_step_delay(STEP_DELAY_S)
    try:
        start = scrape(server.url)
        sent = _completed_requests(server.url)
        middle = scrape(server.url)
        _abort_a_stream(server.url)
        for bad in ({"max_tokens": -1}, {"temperature": -1.0}):  # refused before the engine: counted nowhere
            body = {**_body("t1", 4), **bad}
            assert httpx.post(server.url + "/v1/completions", json=body, headers=AUTH).status_code == 400
        wait_until(lambda: delta(scrape(server.url), middle, "pagoda:request_success_total", finished_reason="abort") == 1,
                   message="the dropped stream was not counted as aborted")
        end = scrape(server.url)
    finally:
        server.set_step_delay(0.0)
    probe = Sent(1, 8, sent[2].prompt_tokens, 8, 8, ["length"])  # the greedy request that found the stop string
    _check_counts(middle, start, [probe, *sent], aborted=0)
    _check_counts(end, start, [probe, *sent], aborted=1)
    _check_phases(middle, start, len(sent) + 1)


def test_the_series_carry_the_model_and_engine_labels_and_vllm_buckets(server):
    samples = scrape(server.url)
    labels = {dict(ls).get("model_name") for (name, ls) in samples if name.startswith("pagoda:")}
    assert labels == {MODEL_NAME}
    assert total(samples, "pagoda:e2e_request_latency_seconds_count", engine="0") > 0
    bounds = sorted(float(dict(ls)["le"]) for (name, ls) in samples
                    if name == "pagoda:e2e_request_latency_seconds_bucket" and dict(ls)["le"] != "+Inf")
    assert bounds[:4] == [0.3, 0.5, 0.8, 1.0] and bounds[-1] == 7680.0  # vLLM's request-latency buckets
    ttft = sorted(float(dict(ls)["le"]) for (name, ls) in samples if name == "pagoda:time_to_first_token_seconds_bucket"
                  and dict(ls)["le"] != "+Inf")
    assert ttft[0] == 0.001 and ttft[-1] == 2560.0
