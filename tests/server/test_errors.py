"""Error statuses and OpenAI-shaped bodies: 400, 401, 404, 503, malformed JSON; others keep working."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import openai
import pytest

from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server

AUTH = {"Authorization": f"Bearer {API_KEY}"}


def post(server, path: str, body, headers=AUTH, **kwargs) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=headers, timeout=30, **kwargs)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


@pytest.mark.parametrize("field, value, needle", [
    ("temperature", -1, "temperature must be >= 0"),
    ("top_p", 1.5, "top_p must be in (0, 1]"),
    ("n", 0, "n must be"),
    ("logprobs", 50, "logprobs must be"),
    ("max_tokens", 0, "max_tokens must be"),
    ("presence_penalty", 3, "presence_penalty must be"),
    ("priority", -(2**63) - 1, "greater than or equal to"),  # found by the fuzzer: was a 500 (msgpack overflow)
    ("seed", 2**64, "less than or equal to"),
])
def test_bad_sampling_values_are_400_naming_the_field(server, field, value, needle):
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", field: value}), 400)
    assert needle in error["message"] and error["param"] == field and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("path, field, value", [
    ("/v1/chat/completions", "response_format", {"type": "structural_tag"}),  # json_schema/json_object work now
    ("/v1/completions", "tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),  # chat only
    ("/v1/completions", "tool_choice", "required"),
    ("/v1/chat/completions", "functions", [{"name": "f", "parameters": {}}]),  # deprecated: send tools
    ("/v1/chat/completions", "function_call", "none"),  # deprecated: send tool_choice
    ("/v1/chat/completions", "function_call", {"name": "f"}),
    ("/v1/chat/completions", "echo", True),  # a /v1/completions field
    ("/v1/chat/completions", "chat_template_kwargs", {"enable_thinking": False}),  # vLLM's, not implemented
    ("/v1/chat/completions", "continue_final_message", True),
    ("/v1/completions", "prompt_logprobs", 1),
    ("/v1/completions", "guided_whitespace_pattern", " "),
    ("/v1/chat/completions", "modalities", ["text", "audio"]),
    ("/v1/completions", "length_penalty", 2.0),  # beam search only
    ("/v1/chat/completions", "early_stopping", True),
    ("/v1/completions", "structured_outputs", {"json": {"type": "object"}}),
    ("/v1/chat/completions", "best_of", 3),  # logit_bias works now; best_of is a completions field
    ("/v1/completions", "suffix", " end"),
])
def test_fields_asking_for_a_guarantee_are_400_not_ignored(server, path, field, value):
    body = {"model": MODEL_NAME, field: value, **({"prompt": "t1"} if path == "/v1/completions" else
                                                  {"messages": [{"role": "user", "content": "t1"}]})}
    error = error_of(post(server, path, body), 400)
    assert error["param"] == field and error["code"] == "unsupported_parameter"
    assert f"remove '{field}'" in error["message"]


def test_continuous_usage_stats_is_400_not_ignored(server):
    body = {"model": MODEL_NAME, "prompt": "t1", "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    error = error_of(post(server, "/v1/completions", body), 400)
    assert error["param"] == "stream_options" and "remove continuous_usage_stats" in error["message"]


def test_fields_asking_for_nothing_are_accepted(server):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "t1"}], "max_tokens": 2,
            "response_format": {"type": "text"}, "tool_choice": "none", "logit_bias": {}, "user": "u", "store": False,
            "modalities": ["text"], "echo": False, "length_penalty": 1.0, "stream_options": {"include_usage": True}}
    assert post(server, "/v1/chat/completions", body).status_code == 200


def test_prompt_plus_max_tokens_past_the_context_is_400_with_the_arithmetic(server):
    limit = server.engine.max_model_len
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1 t2 t3", "max_tokens": 100_000_000}), 400)
    assert error["param"] == "max_tokens" and f"maximum context length is {limit} tokens" in error["message"]
    assert "(3 in the prompt, 100000000 to generate)" in error["message"] and f"at most {limit - 3}" in error["message"]
    ok = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1 t2 t3", "max_tokens": 2})
    assert ok.status_code == 200


def test_n_beyond_the_per_request_limit_is_400(server):
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", "n": 17, "max_tokens": 1}), 400)
    assert error["param"] == "n" and "--max-n-per-request" in error["message"]
    ok = post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", "n": 16, "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 16


def test_unknown_chat_role_is_400(server):
    body = {"model": MODEL_NAME, "messages": [{"role": "wizard", "content": "t1"}]}
    error = error_of(post(server, "/v1/chat/completions", body), 400)
    assert "role" in (error["param"] or "") and "assistant" in error["message"]  # the allowed roles are named


def test_body_over_the_limit_is_413_and_the_server_goes_on(server):
    from pagoda.server.app import MAX_BODY_BYTES

    big = b'{"prompt": "' + b"t1 " * (MAX_BODY_BYTES // 3) + b'"}'
    response = httpx.post(server.url + "/v1/completions", content=big, headers={**AUTH, "content-type": "application/json"},
                          timeout=60)
    error = error_of(response, 413)
    assert error["code"] == "request_too_large" and str(MAX_BODY_BYTES) in error["message"]
    assert post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", "max_tokens": 1}).status_code == 200


def test_wrong_types_and_missing_fields_are_400(server):
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", "n": "two"}), 400)
    assert error["param"] == "n"
    error = error_of(post(server, "/v1/chat/completions", {"model": MODEL_NAME}), 400)
    assert error["param"] == "messages" and "messages" in error["message"]
    error = error_of(post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "t1"}],
                                                          "top_logprobs": 2}), 400)
    assert error["param"] == "top_logprobs"


def test_malformed_json_is_400(server):
    response = httpx.post(server.url + "/v1/completions", content=b'{"prompt": "t1",', timeout=10,
                          headers={**AUTH, "Content-Type": "application/json"})
    assert "not valid JSON" in error_of(response, 400)["message"]


def test_prompt_too_long_or_empty_is_400(server, client):
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": list(range(300))}), 400)
    assert "max_model_len is 256" in error["message"] and error["param"] == "prompt"
    error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": ""}), 400)
    assert "empty" in error["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt=list(range(300)))
    assert client.completions.create(model=MODEL_NAME, prompt="t1", max_tokens=2).usage.completion_tokens == 2


def test_unknown_model_is_404(server, client):
    error = error_of(post(server, "/v1/completions", {"model": "gpt-9", "prompt": "t1"}), 404)
    assert "gpt-9" in error["message"] and error["param"] == "model" and error["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "t1"}])


def test_api_key_required_except_health_and_metrics(server):
    body = {"model": MODEL_NAME, "prompt": "t1", "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": API_KEY}):
        error = error_of(post(server, "/v1/completions", body, headers=headers), 401)
        assert error["type"] == "authentication_error"
    assert error_of(httpx.get(server.url + "/v1/models"), 401)["code"] == "invalid_api_key"
    assert httpx.get(server.url + "/health").status_code == 200
    assert httpx.get(server.url + "/metrics").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0).models.list()


@pytest.mark.parametrize("how", ["raises", "killed"])
def test_engine_core_crash_fails_pending_then_503(tiny_chat_model, how):
    """A core that fails (an error in its loop, or its process killed) fails in-flight requests,
    streaming and not, with a clear 503; /health reports it; the server keeps answering."""
    running = start_server(engine_config(tiny_chat_model), api_key=None, name="crashy")
    running.set_step_delay(0.02)
    crash = {"raises": lambda: running.control.call_utility("fail_next_step", "boom"),
             "killed": lambda: os.kill(running.core.pid, signal.SIGKILL)}[how]
    needle = {"raises": "boom", "killed": "exited unexpectedly"}[how]
    try:
        asyncio.run(_crash_scenario(running.url, crash, needle))
        error = error_of(post(running, "/v1/completions", {"prompt": "t1"}, headers={}), 503)
        assert needle in error["message"] and error["type"] == "service_unavailable"
        health = httpx.get(running.url + "/health")
        assert health.status_code == 503 and needle in health.json()["error"]["message"]
        assert httpx.get(running.url + "/metrics").status_code == 200
    finally:
        running.stop()


async def _crash_scenario(url: str, crash, needle: str) -> None:
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
    long = dict(model="crashy", prompt="t1 t2", max_tokens=200, temperature=0)
    whole = asyncio.create_task(client.completions.create(**long))
    stream = await client.completions.create(stream=True, **long)
    pieces = []
    with pytest.raises(openai.APIError, match=needle):
        async for chunk in stream:
            pieces.append(chunk.choices[0].text)
            if len(pieces) == 1:
                crash()
    assert pieces and len(pieces) < 200
    with pytest.raises(openai.APIStatusError) as info:
        await whole
    assert info.value.status_code == 503 and needle in info.value.message


def test_new_requests_while_draining_are_503_and_health_says_so(server):
    """What SIGTERM sets (DrainingServer.handle_exit): a request on a connection still open gets
    503; /health turns 503; /metrics stays open. (The SIGTERM drills in test_serve_cli.py also
    accept a refused connection, which is what a new connection meets once uvicorn stops listening.)"""
    server.engine.draining = True
    try:
        error = error_of(post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1"}), 503)
        assert error["code"] == "engine_unavailable" and "shutting down" in error["message"]
        health = httpx.get(server.url + "/health", timeout=10)
        assert health.status_code == 503 and "shutting down" in health.json()["error"]["message"]
        assert httpx.get(server.url + "/metrics", timeout=10).status_code == 200
    finally:
        server.engine.draining = False
    assert post(server, "/v1/completions", {"model": MODEL_NAME, "prompt": "t1", "max_tokens": 1}).status_code == 200
