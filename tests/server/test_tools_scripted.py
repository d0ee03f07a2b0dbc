"""Tool calling and reasoning over HTTP on scripted outputs (a random model never writes them): the
app answers through an engine that replays given text pieces, so the parsers, the OpenAI shapes
and the 400s are checked exactly, in-process, with the openai SDK."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import sys
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient
from tool_helpers import TOOLS_TEMPLATE, ScriptedEngine

from pagoda.cli.main import build_parser
from pagoda.errors import UnknownChoiceError
from pagoda.plugins import get_plugin_manager
from pagoda.server.app import build_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smollm import hf_tokenizer  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]
# Pieces cut inside markers and inside the JSON, as tokens would cut them.
REPLY = ["<thi", "nk>Oslo is cold", ".</th", "ink>\n\nLet me check.<tool", "_call>\n{\"name\": \"get_weather\", ",
         "\"arguments\": {\"ci", "ty\": \"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}",
         "</tool_call>"]


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = copy.deepcopy(hf_tokenizer())
    tokenizer.chat_template = TOOLS_TEMPLATE
    return tokenizer


@pytest.fixture(scope="module")
def make_client(tokenizer):
    def make(**options) -> tuple[openai.OpenAI, ScriptedEngine]:
        engine = ScriptedEngine(tokenizer)
        app = build_app(engine, ["scripted"], None, **options)
        client = openai.OpenAI(base_url="http://testserver/v1", api_key="none", max_retries=0,
                               http_client=TestClient(app))
        return client, engine

    return make


def ask(client, **request):
    return client.chat.completions.create(model="scripted", messages=request.pop("messages", MESSAGES), **request)


def test_reasoning_content_and_calls_whole_and_streamed(make_client) -> None:
    client, engine = make_client(tool_parser="hermes", reasoning_parser="qwen3")
    engine.script = [REPLY, REPLY]
    choice = ask(client, tools=TOOLS).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == "Oslo is cold." and choice.message.content == "Let me check."
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == [("get_weather", {"city": "Oslo"}), ("get_time", {})]
    chunks = list(ask(client, tools=TOOLS, stream=True))
    first = chunks[0].choices[0].delta
    assert first.role == "assistant" and first.content is None
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert (reasoning, content) == ("Oslo is cold.", "Let me check.")
    starts = [d for c in chunks for d in c.choices[0].delta.tool_calls or [] if d.id]
    assert [(d.index, d.type, d.function.name, d.function.arguments) for d in starts] == [
        (0, "function", "get_weather", ""), (1, "function", "get_time", "")]
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"
    assert chunks[-1].choices[0].delta.model_dump(exclude_none=True) in ({}, {"role": None})


def test_parallel_tool_calls_false_returns_the_first_call(make_client) -> None:
    client, engine = make_client(tool_parser="hermes")
    engine.script = [["Let me check.<tool"] + REPLY[4:]]
    message = ask(client, tools=TOOLS, parallel_tool_calls=False).choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]


def test_a_json_answer_asked_by_response_format_is_content_not_a_call(make_client) -> None:
    client, engine = make_client(tool_parser="llama3_json")
    answer = '{"name": "get_time", "parameters": {}}'
    engine.script = [[answer], [answer]]
    choice = ask(client, tools=TOOLS, response_format={"type": "json_object"}).choices[0]
    assert (choice.message.content, choice.message.tool_calls, choice.finish_reason) == (answer, None, "stop")
    assert ask(client, tools=TOOLS).choices[0].message.tool_calls[0].function.name == "get_time"  # without it: a call


def test_mistral_requests_keep_special_tokens_and_get_9_character_ids(make_client) -> None:
    client, engine = make_client(tool_parser="mistral")
    engine.script = [["[TOOL_CALLS][{\"name\": \"get_time\", ", "\"arguments\": {}}]"]]
    call = ask(client, tools=TOOLS).choices[0].message.tool_calls[0]
    assert call.function.name == "get_time" and len(call.id) == 9
    assert engine.requests[0].params.skip_special_tokens is False


def test_tools_and_tool_history_reach_the_chat_template(make_client) -> None:
    client, engine = make_client()
    engine.script = [["It is 3 degrees."]]
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 3}'}]
    reply = ask(client, messages=history, tools=TOOLS, tool_choice="none")
    assert reply.choices[0].message.content == "It is 3 degrees." and reply.choices[0].finish_reason == "stop"
    prompt = engine.requests[0].prompt
    assert '"name": "get_time"' in prompt  # the tools, rendered by the template
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>' in prompt  # a dict, not a string
    assert '<tool_response>{"temp": 3}</tool_response>' in prompt


@pytest.mark.parametrize("request_fields, param, needle", [
    ({"tools": TOOLS}, "tool_choice", '"auto" tool choice needs a tool-call parser'),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "'nope', which is not in tools ('get_weather', 'get_time')"),
    ({"tool_choice": "required"}, "tool_choice", "needs the functions it may call"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "send only one of them"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nonsense"}}}],
      "tool_choice": "required"}, "tools", "cannot be enforced"),
])
def test_tool_requests_it_cannot_honour_are_400(make_client, request_fields, param, needle) -> None:
    client, _ = make_client()
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, **request_fields)
    error = caught.value.body
    assert error["param"] == param and needle in error["message"], error
    if param == "tool_choice" and "auto" in needle:
        assert "--tool-call-parser NAME (available: hermes, llama3_json, mistral" in error["message"]


def test_tools_on_completions_are_refused(make_client) -> None:
    client, _ = make_client(tool_parser="hermes")
    with pytest.raises(openai.BadRequestError, match="available on /v1/chat/completions only"):
        client.completions.create(model="scripted", prompt="x", extra_body={"tools": TOOLS})


def test_unknown_parser_names_fail_at_start_with_the_registered_ones() -> None:
    with pytest.raises(UnknownChoiceError, match="Unknown reasoning parser 'r1'. Available: deepseek_r1, qwen3"):
        build_app(ScriptedEngine.__new__(ScriptedEngine), ["x"], reasoning_parser="r1")
    parser = build_parser(get_plugin_manager())
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), pytest.raises(SystemExit) as exited:  # a CLI error, before any load
        parser.parse_args(["serve", "--tool-call-parser", "hermez", "--port", "0"])
    assert exited.value.code == 2
    assert ("Unknown tool-call parser 'hermez'. Available: hermes, llama3_json, mistral. Did you mean 'hermes'"
            in errors.getvalue())
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        parser.parse_args(["serve", "--help"])
    assert "--tool-call-parser NAME" in help_text.getvalue() and "--reasoning-parser NAME" in help_text.getvalue()


FUNCTIONS = [tool["function"] for tool in TOOLS]


@pytest.mark.parametrize("legacy, param, replacement", [
    ({"functions": FUNCTIONS}, "functions", 'send each function as tools: [{"type": "function"'),
    ({"functions": FUNCTIONS, "function_call": {"name": "get_time"}}, "functions", "send each function as tools"),
    ({"tools": TOOLS, "function_call": "none"}, "function_call", "send tool_choice"),
    ({"tools": TOOLS, "function_call": {"name": "get_time"}}, "function_call", "send tool_choice"),
])
def test_legacy_functions_fields_are_400_naming_the_replacement(make_client, legacy, param, replacement) -> None:
    """OpenAI's deprecated functions/function_call, sent as the official SDK sends them: never ignored."""
    client, engine = make_client()  # no parser: still the legacy field's 400, not the "auto" one
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, **legacy)
    error = caught.value.body
    assert error["param"] == param and error["code"] == "unsupported_parameter", error
    assert replacement in error["message"] and f"remove '{param}'" in error["message"] and "docs/tools.md" in error["message"]
    assert engine.requests == []  # nothing was generated


def test_a_legacy_function_call_in_the_history_is_400(make_client) -> None:
    client, engine = make_client()
    history = MESSAGES + [{"role": "assistant", "content": None,
                           "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
                          {"role": "user", "content": "And now?"}]
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, messages=history, tools=TOOLS, tool_choice="none")
    error = caught.value.body
    assert error["param"] == "messages.1.function_call" and "send it as tool_calls" in error["message"], error
    assert engine.requests == []


def test_strict_tools_are_enforced_or_refused(make_client) -> None:
    """strict: guaranteed by guided decoding for a named / required choice; under "auto" a 400, not ignored."""
    client, engine = make_client(tool_parser="hermes")
    strict = [{"type": "function", "function": {**TOOLS[0]["function"], "strict": True}}]
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, tools=strict)
    error = caught.value.body
    assert error["param"] == "tools" and "'get_weather' is strict" in error["message"] and '"required"' in error["message"]
    engine.script = [['{"city": "Oslo"}']]
    reply = ask(client, tools=strict, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert reply.choices[0].message.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    assert engine.requests[0].params.guided_decoding.json == TOOLS[0]["function"]["parameters"]
