"""The Responses and Messages APIs on scripted outputs (reasoning and tool calls a random model never
writes): the app answers through an engine that replays given text pieces, so the typed output items,
the content blocks and their streamed events are checked exactly, in-process, with the official SDKs;
and each API's prompt is the chat route's prompt for the same conversation."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient
from tool_helpers import TOOLS_TEMPLATE, ScriptedEngine

from pagoda.server.app import build_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smollm import hf_tokenizer  # noqa: E402
from pagoda.testing import import_or_skip

anthropic = import_or_skip("anthropic")

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
              {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
RESPONSES_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
                   {"type": "function", "name": "get_time", "parameters": {"type": "object"}}]
ANTHROPIC_TOOLS = [{"name": "get_weather", "input_schema": WEATHER},
                   {"name": "get_time", "input_schema": {"type": "object"}}]
# Pieces cut inside markers and inside the JSON, as tokens would cut them; whitespace before the calls.
REPLY = ["<thi", "nk>Oslo is cold", ".</th", "ink>\n\nLet me check. ", " <tool",
         "_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"ci",
         "ty\": \"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}", "</tool_call>"]
ONLY_CALL = ["  \n", "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>"]
EXPECTED = [("reasoning", "Oslo is cold."), ("message", "Let me check.  "), ("function_call", "get_weather", {"city": "Oslo"}),
            ("function_call", "get_time", {})]


@pytest.fixture(scope="module")
def app_factory():
    tokenizer = copy.deepcopy(hf_tokenizer())
    tokenizer.chat_template = TOOLS_TEMPLATE

    def make():
        engine = ScriptedEngine(tokenizer)
        app = build_app(engine, ["scripted"], None, tool_parser="hermes", reasoning_parser="qwen3")
        return TestClient(app), engine

    return make


@pytest.fixture
def clients(app_factory):
    http, engine = app_factory()
    openai_client = openai.OpenAI(base_url="http://testserver/v1", api_key="none", max_retries=0, http_client=http)
    anthropic_client = anthropic.Anthropic(base_url="http://testserver", api_key="none", max_retries=0,
                                           http_client=http)
    return openai_client, anthropic_client, engine


def items_of(output) -> list[tuple]:
    """(type, text) of reasoning and message items, (type, name, arguments) of calls."""
    out = []
    for item in output:
        if item.type == "reasoning":
            out.append(("reasoning", "".join(part.text for part in item.content)))
        elif item.type == "message":
            out.append(("message", "".join(part.text for part in item.content)))
        else:
            out.append(("function_call", item.name, json.loads(item.arguments)))
    return out


def test_responses_reasoning_text_and_calls_whole_and_streamed(clients) -> None:
    client, _, engine = clients
    engine.script = [REPLY, REPLY]
    whole = client.responses.create(model="scripted", input="Weather in Oslo?", tools=RESPONSES_TOOLS)
    assert whole.status == "completed" and items_of(whole.output) == EXPECTED
    assert [item.call_id for item in whole.output[2:]] and all(i.call_id.startswith("call_") for i in whole.output[2:])
    with client.responses.stream(model="scripted", input="Weather in Oslo?", tools=RESPONSES_TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert items_of(final.output) == EXPECTED
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    added = [event.item.type for event in events if event.type == "response.output_item.added"]
    assert added == ["reasoning", "message", "function_call", "function_call"]
    reasoning = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert (reasoning, text, arguments) == ("Oslo is cold.", "Let me check.  ", '{"city": "Oslo"}{}')
    assert final.usage.output_tokens_details.reasoning_tokens > 0


def test_a_reply_of_only_calls_has_no_message_item_whole_or_streamed(clients) -> None:
    client, anthropic_client, engine = clients
    engine.script = [ONLY_CALL, ONLY_CALL, ONLY_CALL, ONLY_CALL]
    whole = client.responses.create(model="scripted", input="Time?", tools=RESPONSES_TOOLS)
    with client.responses.stream(model="scripted", input="Time?", tools=RESPONSES_TOOLS) as stream:
        streamed = stream.get_final_response()
    assert items_of(whole.output) == items_of(streamed.output) == [("function_call", "get_time", {})]
    message = anthropic_client.messages.create(model="scripted", max_tokens=50, tools=ANTHROPIC_TOOLS,
                                               messages=[{"role": "user", "content": "Time?"}])
    with anthropic_client.messages.stream(model="scripted", max_tokens=50, tools=ANTHROPIC_TOOLS,
                                          messages=[{"role": "user", "content": "Time?"}]) as stream:
        final = stream.get_final_message()
    for reply in (message, final):
        assert [block.type for block in reply.content] == ["tool_use"] and reply.stop_reason == "tool_use"
        assert reply.content[0].input == {} and reply.content[0].id.startswith("toolu_")


def blocks_of(content) -> list[tuple]:
    out = []
    for block in content:
        if block.type == "thinking":
            out.append(("reasoning", block.thinking))
        elif block.type == "text":
            out.append(("message", block.text))
        else:
            out.append(("function_call", block.name, block.input))
    return out


def test_messages_thinking_text_and_tool_use_whole_and_streamed(clients) -> None:
    _, client, engine = clients
    engine.script = [REPLY, REPLY]
    request = dict(model="scripted", max_tokens=100, tools=ANTHROPIC_TOOLS,
                   messages=[{"role": "user", "content": "Weather in Oslo?"}])
    whole = client.messages.create(**request)
    assert blocks_of(whole.content) == EXPECTED and whole.stop_reason == "tool_use"
    with client.messages.stream(**request) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert blocks_of(final.content) == EXPECTED and final.stop_reason == "tool_use"
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "message_delta" in kinds
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use", "tool_use"]
    assert kinds.count("content_block_stop") == 4


def test_each_api_renders_the_chat_routes_prompt(clients) -> None:
    """The Responses and Messages requests of one conversation (system, user, a call, its result)
    reach the engine as the same prompt as the chat request."""
    client, anthropic_client, engine = clients
    engine.script = [["Sunny."]] * 3
    client.chat.completions.create(model="scripted", tools=CHAT_TOOLS, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    client.responses.create(model="scripted", instructions="Be brief.", tools=RESPONSES_TOOLS, input=[
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}])
    anthropic_client.messages.create(model="scripted", max_tokens=20, system="Be brief.", tools=ANTHROPIC_TOOLS,
                                     messages=[{"role": "user", "content": "Weather in Oslo?"},
                                               {"role": "assistant", "content": [
                                                   {"type": "tool_use", "id": "call_1", "name": "get_weather",
                                                    "input": {"city": "Oslo"}}]},
                                               {"role": "user", "content": [
                                                   {"type": "tool_result", "tool_use_id": "call_1",
                                                    "content": "sunny"}]}])
    prompts = [request.prompt for request in engine.requests]
    assert prompts[0] == prompts[1] == prompts[2]
    assert "<tool_response>sunny</tool_response>" in prompts[0] and "Be brief." in prompts[0]


def test_a_text_reply_whole_equals_streamed_and_stop_reasons(clients) -> None:
    client, anthropic_client, engine = clients
    engine.script = [["It is", " cold."]] * 4
    whole = client.responses.create(model="scripted", input="Weather?")
    with client.responses.stream(model="scripted", input="Weather?") as stream:
        streamed = stream.get_final_response()
    assert whole.output_text == streamed.output_text == "It is cold."
    message = anthropic_client.messages.create(model="scripted", max_tokens=9, messages=[{"role": "user",
                                                                                          "content": "Weather?"}])
    with anthropic_client.messages.stream(model="scripted", max_tokens=9,
                                          messages=[{"role": "user", "content": "Weather?"}]) as stream:
        final = stream.get_final_message()
    assert message.content[0].text == final.content[0].text == "It is cold."
    assert message.stop_reason == final.stop_reason == "end_turn"
