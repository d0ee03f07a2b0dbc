"""OpenAI's Responses API with the official ``openai`` SDK against tiny models: every output equals the
Chat Completions route's for the same greedy conversation; streamed events add up to the whole
response; stored responses continue with ``previous_response_id``, are fetched, deleted, cancelled; bad
input is a 400 (404) naming the Responses field."""

from __future__ import annotations

import json
import time

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from server_helpers import API_KEY, MODEL_NAME, metric, read_metrics
from tool_helpers import MESSAGES, SCHEMAS, TOOLS, start_tool_server

from pagoda.server.errors import APIError
from pagoda.server.responses_api.store import ResponseStore, StoredResponse

GREEDY = {"temperature": 0, "max_output_tokens": 8}


def chat_text(client, messages, **fields) -> str:
    reply = client.chat.completions.create(model=MODEL_NAME, messages=messages, temperature=0, max_tokens=8, **fields)
    return reply.choices[0].message.content


def test_create_equals_chat_and_reports_usage(client) -> None:
    response = client.responses.create(model=MODEL_NAME, input="t21 t22", **GREEDY)
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "t21 t22"}],
                                          temperature=0, max_tokens=8)
    assert response.output_text == chat.choices[0].message.content and len(response.output_text.split()) == 8
    assert response.id.startswith("resp_") and response.object == "response" and response.model == MODEL_NAME
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [item] = response.output
    assert (item.type, item.role, item.status, item.content[0].type) == ("message", "assistant", "incomplete",
                                                                          "output_text")
    assert (response.usage.input_tokens, response.usage.output_tokens) == (chat.usage.prompt_tokens, 8)
    assert response.usage.total_tokens == chat.usage.total_tokens


def test_instructions_and_input_items_are_the_chat_messages(client) -> None:
    response = client.responses.create(model=MODEL_NAME, instructions="t20", input=[
        {"role": "user", "content": [{"type": "input_text", "text": "t21"}, {"type": "input_text", "text": " t22"}]}],
        **GREEDY)
    assert response.output_text == chat_text(client, [{"role": "system", "content": "t20"},
                                                      {"role": "user", "content": "t21 t22"}])
    assert response.instructions == "t20"


def test_streamed_events_add_up_to_the_response(client) -> None:
    whole = client.responses.create(model=MODEL_NAME, input="t31 t32", **GREEDY)
    events = list(client.responses.create(model=MODEL_NAME, input="t31 t32", stream=True, **GREEDY))
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) == 8 and "".join(deltas) == whole.output_text
    assert events[-1].response.output[0].content[0].text == whole.output_text
    assert events[0].response.status == "in_progress" and events[0].response.id == events[-1].response.id


def test_stream_helper_final_response_with_a_stop_sequence(client) -> None:
    """``responses.stream`` (the SDK's helper) on a response that completes (a Pagoda stop string)."""
    whole = client.responses.create(model=MODEL_NAME, input="t31 t32", **GREEDY)
    stop = " " + whole.output_text.split()[3]
    request = dict(model=MODEL_NAME, input="t31 t32", extra_body={"stop": [stop]}, **GREEDY)
    with client.responses.stream(**request) as stream:
        text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == text == whole.output_text.split(stop)[0]
    assert client.responses.create(**request).output_text == text


def test_previous_response_id_continues_the_conversation(client) -> None:
    first = client.responses.create(model=MODEL_NAME, instructions="t20", input="t21 t22", **GREEDY)
    second = client.responses.create(model=MODEL_NAME, previous_response_id=first.id, input="t40", **GREEDY)
    history = [{"role": "user", "content": "t21 t22"}, {"role": "assistant", "content": first.output_text},
               {"role": "user", "content": "t40"}]  # instructions are not carried over (OpenAI's rule)
    assert second.output_text == chat_text(client, history)
    assert second.previous_response_id == first.id
    third = client.responses.create(model=MODEL_NAME, previous_response_id=second.id, input="t41", **GREEDY)
    assert third.output_text == chat_text(client, history + [{"role": "assistant", "content": second.output_text},
                                                             {"role": "user", "content": "t41"}])


def test_stored_responses_are_fetched_and_deleted_unstored_ones_are_not(client) -> None:
    response = client.responses.create(model=MODEL_NAME, input="t50", **GREEDY)
    fetched = client.responses.retrieve(response.id)
    assert fetched.output_text == response.output_text and fetched.status == "incomplete" and fetched.store
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.responses.retrieve(response.id)
    unstored = client.responses.create(model=MODEL_NAME, input="t50", store=False, **GREEDY)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model=MODEL_NAME, input="t51", previous_response_id=unstored.id, **GREEDY)
    assert info.value.body["param"] == "previous_response_id" and "store=false" in info.value.body["message"]


def test_a_background_response_is_polled_and_one_is_cancelled(client, server) -> None:
    whole = client.responses.create(model=MODEL_NAME, input="t52 t53", **GREEDY)
    started = client.responses.create(model=MODEL_NAME, input="t52 t53", background=True, **GREEDY)
    assert started.status == "in_progress" and started.background
    while (polled := client.responses.retrieve(started.id)).status == "in_progress":
        time.sleep(0.05)
    assert polled.status == "incomplete" and polled.output_text == whole.output_text
    server.set_step_delay(0.05)  # keep it running until it is cancelled
    try:
        slow = client.responses.create(model=MODEL_NAME, input="t54", background=True, temperature=0,
                                       max_output_tokens=200)
        time.sleep(0.3)
        cancelled = client.responses.cancel(slow.id)
    finally:
        server.set_step_delay(0.0)
    assert cancelled.status == "cancelled" and client.responses.retrieve(slow.id).status == "cancelled"
    deadline = time.monotonic() + 10
    while metric(read_metrics(server.url), "pagoda:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(read_metrics(server.url), "pagoda:kv_cache_usage_perc") == 0 and server.engine.num_pending == 0
    with pytest.raises(openai.BadRequestError, match="background"):
        client.responses.cancel(whole.id)


@pytest.mark.parametrize("fields, param, needle", [
    ({"extra_body": {"frobnicate": 1}}, "frobnicate", "unknown field"),
    ({"reasoning": {"effort": "high"}}, "reasoning", "--reasoning-parser"),
    ({"truncation": "auto"}, "truncation", "disabled"),
    ({"include": ["message.output_text.logprobs"]}, "include", "remove"),
    ({"top_logprobs": 2}, "top_logprobs", "/v1/chat/completions"),
    ({"tools": [{"type": "web_search"}]}, "tools.0.type", "function tools"),
    ({"tools": [{"type": "function", "name": "f", "defer_loading": True}]}, "tools.0.defer_loading", "remove"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input.0.type", "item_reference"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input.0.content.0.type",
     "input_file"),
    ({"text": {"format": {"type": "grammar"}}}, "text.format", "json_schema"),
    ({"max_output_tokens": 100000}, "max_output_tokens", "set max_output_tokens to at most"),
    ({"stream": True, "background": True}, "background", "not both"),
])
def test_what_cannot_be_honoured_is_a_400_naming_the_field(client, fields, param, needle) -> None:
    request = {"model": MODEL_NAME, "input": "t5", **fields}
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(**request)
    assert info.value.body["param"] == param and needle in info.value.body["message"], info.value.body


def test_unknown_model_and_response_are_404(client) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="nope", input="t5")
    assert info.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError, match="--responses-store-size"):
        client.responses.retrieve("resp_missing")


def test_the_store_is_bounded_and_expires(monkeypatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    store = ResponseStore(max_entries=2, ttl_s=10)

    def entry(name: str, status: str = "completed") -> StoredResponse:
        return StoredResponse({"id": name, "status": status}, [])

    store.put(entry("running", "in_progress"))
    for name in ("a", "b", "c"):
        store.put(entry(name))
    assert len(store) == 3 and store.get("running") and store.get("b") and store.get("c")  # "a": the oldest
    with pytest.raises(APIError, match="oldest of 2 kept"):
        store.get("a")
    clock[0] += 11
    assert len(store) == 1 and store.get("running")  # finished ones expire; a running one waits
    store.finished(store.get("running"))
    clock[0] += 11
    assert len(store) == 0


# -- function tools and structured output (a tiny model over SmolLM2's vocabulary, hermes tool calls) -----------
class GetWeather(BaseModel):
    city: str = Field(max_length=8)
    unit: str = Field(pattern="^[cf]$")


RESPONSES_TOOLS = [{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"],
                    **({"description": t["function"]["description"]} if "description" in t["function"] else {})}
                   for t in TOOLS]


@pytest.fixture(scope="module")
def tool_client(tmp_path_factory):
    running = start_tool_server(tmp_path_factory.mktemp("tiny-tool-responses"))
    yield openai.OpenAI(base_url=running.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    running.stop()


def test_function_tools_round_trip_with_previous_response_id(tool_client) -> None:
    first = tool_client.responses.create(model=MODEL_NAME, input=MESSAGES[0]["content"], tools=RESPONSES_TOOLS,
                                         tool_choice="required", temperature=0, max_output_tokens=120)
    chat = tool_client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS,
                                               tool_choice="required", temperature=0, max_tokens=120)
    calls = [item for item in first.output if item.type == "function_call"]
    expected = chat.choices[0].message.tool_calls
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        (c.function.name, json.loads(c.function.arguments)) for c in expected]
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
        assert call.call_id.startswith("call_") and call.status == "completed"
    results = [{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls]
    second = tool_client.responses.create(model=MODEL_NAME, previous_response_id=first.id, input=results,
                                          tools=RESPONSES_TOOLS, tool_choice="none", temperature=0,
                                          max_output_tokens=10)
    history = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [c.model_dump() for c in expected]},
               *({"role": "tool", "tool_call_id": c.id, "content": "sunny"} for c in expected)]
    after = tool_client.chat.completions.create(model=MODEL_NAME, messages=history, tools=TOOLS, tool_choice="none",
                                                temperature=0, max_tokens=10)
    assert second.output_text == after.choices[0].message.content


def test_streamed_function_call_arguments_add_up(tool_client) -> None:
    request = dict(model=MODEL_NAME, input="Time?", tools=RESPONSES_TOOLS, temperature=0, max_output_tokens=80,
                   tool_choice={"type": "function", "name": "get_time"})
    whole = tool_client.responses.create(**request)
    with tool_client.responses.stream(**request) as stream:
        pieces = [event.delta for event in stream if event.type == "response.function_call_arguments.delta"]
        final = stream.get_final_response()
    [call] = [item for item in whole.output if item.type == "function_call"]
    assert call.name == "get_time" and "".join(pieces) == call.arguments == final.output[-1].arguments


def test_parse_with_a_pydantic_model_and_a_pydantic_tool(tool_client) -> None:
    parsed = tool_client.responses.parse(model=MODEL_NAME, input="Weather in Oslo as JSON", text_format=GetWeather,
                                         temperature=0, max_output_tokens=60)
    assert isinstance(parsed.output_parsed, GetWeather)
    chat = tool_client.chat.completions.parse(model=MODEL_NAME, response_format=GetWeather, temperature=0,
                                              max_tokens=60,
                                              messages=[{"role": "user", "content": "Weather in Oslo as JSON"}])
    assert parsed.output_parsed == chat.choices[0].message.parsed
    called = tool_client.responses.parse(model=MODEL_NAME, input="Weather in Oslo?", temperature=0,
                                         max_output_tokens=120, tools=[openai.pydantic_function_tool(GetWeather)],
                                         tool_choice="required", parallel_tool_calls=False)
    [call] = [item for item in called.output if item.type == "function_call"]
    assert isinstance(call.parsed_arguments, GetWeather)
