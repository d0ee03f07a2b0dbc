"""Anthropic's Messages API with the official ``anthropic`` SDK against tiny models: every output equals
the Chat Completions route's for the same greedy conversation; the stream adds up to the whole message;
tool use round-trips; errors come in Anthropic's shape with Anthropic's statuses; ``x-api-key`` and the
bearer key both authenticate.

This SDK takes ``temperature``, ``top_p`` and ``top_k`` through ``extra_body`` (the server reads them)."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from server_helpers import API_KEY, MODEL_NAME
from tool_helpers import MESSAGES, SCHEMAS, TOOLS, start_tool_server
from pagoda.testing import import_or_skip

anthropic = import_or_skip("anthropic")

GREEDY = {"extra_body": {"temperature": 0}}
USER = [{"role": "user", "content": "t21 t22"}]


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=60)


def chat(client, messages, max_tokens=8, **fields):
    return client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0, max_tokens=max_tokens,
                                          **fields)


def test_create_equals_chat(claude, client) -> None:
    message = claude.messages.create(model=MODEL_NAME, max_tokens=8, messages=USER, **GREEDY)
    expected = chat(client, USER)
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == expected.choices[0].message.content
    assert (message.stop_reason, message.stop_sequence, message.model) == ("max_tokens", None, MODEL_NAME)
    usage = message.usage
    assert usage.input_tokens + usage.cache_read_input_tokens == expected.usage.prompt_tokens
    assert usage.output_tokens == 8


def test_system_prompt_and_content_blocks_are_the_chat_messages(claude, client) -> None:
    for system in ("t20", [{"type": "text", "text": "t20"}]):
        message = claude.messages.create(model=MODEL_NAME, max_tokens=8, system=system, **GREEDY, messages=[
            {"role": "user", "content": [{"type": "text", "text": "t21"}, {"type": "text", "text": " t22"}]}])
        assert message.content[0].text == chat(client, [{"role": "system", "content": "t20"}, *USER]).choices[0].message.content


def test_top_k_1_is_greedy(claude, client) -> None:
    message = claude.messages.create(model=MODEL_NAME, max_tokens=8, messages=USER,
                                     extra_body={"top_k": 1, "top_p": 0.9, "temperature": 1.0})
    assert message.content[0].text == chat(client, USER).choices[0].message.content


def test_stream_adds_up_to_the_message(claude) -> None:
    whole = claude.messages.create(model=MODEL_NAME, max_tokens=8, messages=USER, **GREEDY)
    with claude.messages.stream(model=MODEL_NAME, max_tokens=8, messages=USER, **GREEDY) as stream:
        events = list(stream)
        final = stream.get_final_message()
    kinds = [event.type for event in events if event.type != "text"]  # the helper adds "text" events
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds[-3:] == [
        "content_block_stop", "message_delta", "message_stop"]
    deltas = [event.delta.text for event in events if event.type == "content_block_delta"]
    assert len(deltas) == 8 and "".join(deltas) == whole.content[0].text == final.content[0].text
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8


def test_stream_events_on_the_wire(server) -> None:
    body = {"model": MODEL_NAME, "max_tokens": 3, "messages": USER, "stream": True, "temperature": 0}
    with httpx.stream("POST", server.url + "/v1/messages", json=body, headers={"x-api-key": API_KEY}) as response:
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
                     "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert [p["type"] for p in payloads] == names
    assert payloads[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}


def test_stop_sequences(claude, client) -> None:
    text = chat(client, USER).choices[0].message.content
    stop = " " + text.split()[2]
    message = claude.messages.create(model=MODEL_NAME, max_tokens=8, messages=USER, stop_sequences=[stop], **GREEDY)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", stop)
    assert message.content[0].text == text.split(stop)[0] == chat(client, USER, stop=[stop]).choices[0].message.content


def test_count_tokens_is_the_prompt_of_create(claude, client) -> None:
    counted = claude.messages.count_tokens(model=MODEL_NAME, system="t20", messages=USER)
    assert counted.input_tokens == chat(client, [{"role": "system", "content": "t20"}, *USER]).usage.prompt_tokens
    tools = [{"name": "f", "input_schema": {"type": "object"}}]  # "auto" by default: no tool-call parser needed to count
    assert claude.messages.count_tokens(model=MODEL_NAME, messages=USER, tools=tools).input_tokens > 0


def test_prefix_cache_reads_are_counted_apart_whole_and_streamed(claude) -> None:
    long = [{"role": "user", "content": " ".join(f"t{i}" for i in range(30, 60))}]
    total = claude.messages.count_tokens(model=MODEL_NAME, messages=long).input_tokens
    claude.messages.create(model=MODEL_NAME, max_tokens=2, messages=long, **GREEDY)  # fills the prefix cache
    whole = claude.messages.create(model=MODEL_NAME, max_tokens=2, messages=long, **GREEDY).usage
    with claude.messages.stream(model=MODEL_NAME, max_tokens=2, messages=long, **GREEDY) as stream:
        streamed = stream.get_final_message().usage
    for usage in (whole, streamed):
        assert usage.cache_read_input_tokens >= 24 and usage.input_tokens + usage.cache_read_input_tokens == total


def post(server, body: dict, headers: dict | None = None) -> httpx.Response:
    return httpx.post(server.url + "/v1/messages", json=body, timeout=30,
                      headers=headers if headers is not None else {"x-api-key": API_KEY})


@pytest.mark.parametrize("body, status, kind, needle", [
    ({"model": MODEL_NAME, "messages": USER}, 400, "invalid_request_error", "max_tokens: Field required"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": USER, "frobnicate": 1}, 400, "invalid_request_error",
     "frobnicate: Extra inputs are not permitted"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": 9}},
     400, "invalid_request_error", "--reasoning-parser"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": [{"role": "system", "content": "t1"}]}, 400,
     "invalid_request_error", "messages.0.role"),
    ({"model": MODEL_NAME, "max_tokens": 500, "messages": USER}, 400, "invalid_request_error",
     "max_tokens: This model's maximum context length"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}]},
     400, "invalid_request_error", "takes text only"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "data": "x"}}]}]}, 400, "invalid_request_error",
     "messages.0.content.0.type"),
    ({"model": MODEL_NAME, "max_tokens": 5, "messages": USER, "tools": [{"type": "bash_20250124", "name": "bash"}]},
     400, "invalid_request_error", "tools.0.type"),
    ({"model": "nope", "max_tokens": 5, "messages": USER}, 404, "not_found_error", "does not exist"),
])
def test_errors_in_anthropics_shape(server, body, status, kind, needle) -> None:
    response = post(server, body)
    assert response.status_code == status
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == kind and needle in error["error"]["message"], error


def test_both_api_key_headers_authenticate(server) -> None:
    body = {"model": MODEL_NAME, "max_tokens": 2, "messages": USER}
    assert post(server, body, {"Authorization": f"Bearer {API_KEY}"}).status_code == 200
    assert post(server, body, {"x-api-key": API_KEY}).status_code == 200
    for headers in ({}, {"x-api-key": "wrong"}, {"Authorization": "Bearer wrong"}):
        refused = post(server, body, headers)
        assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="wrong", max_retries=0).messages.create(
            model=MODEL_NAME, max_tokens=2, messages=USER)
    openai_shape = httpx.post(server.url + "/v1/chat/completions", json={"messages": USER}, timeout=30).json()
    assert set(openai_shape) == {"error"}  # the OpenAI routes keep OpenAI's shape


# -- tool use (a tiny model over SmolLM2's vocabulary whose chat template renders tools) -------------------------
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"],
                    **({"description": t["function"]["description"]} if "description" in t["function"] else {})}
                   for t in TOOLS]


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    running = start_tool_server(tmp_path_factory.mktemp("tiny-tool-messages"))
    yield running
    running.stop()


def test_tool_use_round_trip(tool_server) -> None:
    import openai

    claude = anthropic.Anthropic(base_url=tool_server.url, api_key=API_KEY, max_retries=0, timeout=60)
    client = openai.OpenAI(base_url=tool_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    first = claude.messages.create(model=MODEL_NAME, max_tokens=120, tools=ANTHROPIC_TOOLS, messages=MESSAGES,
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True}, **GREEDY)
    expected = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                              parallel_tool_calls=False, temperature=0,
                                              max_tokens=120).choices[0].message.tool_calls
    uses = [block for block in first.content if block.type == "tool_use"]
    assert first.stop_reason == "tool_use" and len(uses) == 1
    assert [(u.name, u.input) for u in uses] == [(c.function.name, json.loads(c.function.arguments)) for c in expected]
    for use in uses:
        jsonschema.validate(use.input, SCHEMAS[use.name])
        assert use.id.startswith("toolu_")
    results = [{"type": "tool_result", "tool_use_id": u.id, "content": "sunny"} for u in uses]
    second = claude.messages.create(model=MODEL_NAME, max_tokens=10, tools=ANTHROPIC_TOOLS, tool_choice={"type": "none"},
                                    messages=[*MESSAGES, {"role": "assistant", "content": first.content},
                                              {"role": "user", "content": results}], **GREEDY)
    history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in expected]},
               *({"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in expected)]
    after = client.chat.completions.create(model=MODEL_NAME, messages=history, tools=TOOLS, tool_choice="none",
                                           temperature=0, max_tokens=10)
    assert second.content[0].text == after.choices[0].message.content
    with claude.messages.stream(model=MODEL_NAME, max_tokens=120, tools=ANTHROPIC_TOOLS, messages=MESSAGES,
                                tool_choice={"type": "tool", "name": "get_time"}, **GREEDY) as stream:
        pieces = [e.delta.partial_json for e in stream if e.type == "content_block_delta"
                  and e.delta.type == "input_json_delta"]
        final = stream.get_final_message()
    [use] = final.content
    assert use.name == "get_time" and json.loads("".join(pieces)) == use.input and final.stop_reason == "tool_use"
