"""Tool calling over HTTP with the official openai SDK, against a tiny random Llama over SmolLM2's
vocabulary whose chat template renders tools: named and "required" tool choices (enforced by guided
decoding) streamed and not, the SDK's parse and stream helpers, "auto" with the hermes parser over real model
tokens, and the Python examples of docs/tools.md."""

from __future__ import annotations

import json
import re
import sys
import types
from typing import Literal

import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server
from tool_helpers import DOCS, MESSAGES, SCHEMAS, TOOLS, make_tool_chat_model



class GetWeather(BaseModel):
    city: str = Field(max_length=8)
    unit: Literal["c", "f"]


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory):
    path = make_tool_chat_model(tmp_path_factory.mktemp("tiny-tool-chat"))
    running = start_server(engine_config(path, max_model_len=512, kv_cache_memory=64 << 20), tool_parser="hermes")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(tool_server):
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)


def check_call(call, name: str | None = None) -> dict:
    """An OpenAI tool call whose arguments validate against its tool's parameters."""
    assert call.type == "function" and re.fullmatch(r"call_[A-Za-z0-9]{24}", call.id)
    assert name is None or call.function.name == name
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def test_a_named_tool_choice_always_calls_that_function(client) -> None:
    reply = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, n=2, seed=5,
                                           temperature=1.0, max_tokens=80,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}})
    for choice in reply.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        check_call(choice.message.tool_calls[0], "get_time")


def test_required_tool_choice_streams_openai_deltas_that_add_up_to_the_reply(client) -> None:
    request = dict(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, tool_choice="required", seed=11,
                   temperature=1.0, max_tokens=150)
    reply = client.chat.completions.create(**request)
    print("required:", reply.usage.completion_tokens, "tokens")
    whole = reply.choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content is None
    expected = [(c.function.name, check_call(c)) for c in whole.message.tool_calls]
    calls: list[dict] = []
    finish = None
    for chunk in client.chat.completions.create(**request, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            if delta.id is not None:  # the first delta of a call: index, id, type, name and ""
                assert delta.index == len(calls) and delta.type == "function" and delta.function.arguments == ""
                calls.append({"id": delta.id, "name": delta.function.name, "arguments": ""})
            else:
                assert delta.type is None and delta.function.name is None
                calls[delta.index]["arguments"] += delta.function.arguments
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == expected  # same seed, same calls
    assert all(re.fullmatch(r"call_[A-Za-z0-9]{24}", c["id"]) for c in calls)


def test_the_sdk_stream_helper_parses_a_pydantic_tool(client) -> None:
    with client.beta.chat.completions.stream(model=MODEL_NAME, messages=MESSAGES, max_tokens=80, temperature=1.0,
                                             tools=[openai.pydantic_function_tool(GetWeather)],
                                             tool_choice={"type": "function", "function": {"name": "GetWeather"}}) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls" and final.choices[0].message.content is None
    assert isinstance(final.choices[0].message.tool_calls[0].function.parsed_arguments, GetWeather)


# The hermes format, shaped by a regex so that the random model writes it with its own tokens.
HERMES_OUTPUT = r'Sure\.<tool_call>\{"name": "get_weather", "arguments": \{"city": "[a-z]{1,4}", "unit": "c"\}\}</tool_call>'


def test_auto_tool_choice_parses_hermes_calls_from_model_tokens(client) -> None:
    request = dict(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, max_tokens=80, temperature=0.0,
                   extra_body={"guided_regex": HERMES_OUTPUT})
    whole = client.chat.completions.create(**request).choices[0]
    assert whole.finish_reason == "tool_calls" and whole.message.content == "Sure."
    arguments = check_call(whole.message.tool_calls[0], "get_weather")
    content, streamed = "", ""
    for chunk in client.chat.completions.create(**request, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        streamed += "".join(call.function.arguments or "" for call in delta.tool_calls or [])
        assert "<tool" not in (delta.content or "")
    assert content == "Sure." and json.loads(streamed) == arguments


def test_the_python_examples_of_the_docs_run(tool_server, capsys, monkeypatch) -> None:
    blocks = [block for block in re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
              if "from pagoda import LLM" not in block]  # the offline one: test_tools_offline.py
    assert len(blocks) >= 4
    module = types.ModuleType("docs_tools_examples")  # a real module: pydantic resolves annotations there
    monkeypatch.setitem(sys.modules, module.__name__, module)
    for block in blocks:
        code = block.replace("http://127.0.0.1:8000/v1", tool_server.url + "/v1").replace('"EMPTY"', repr(API_KEY))
        exec(compile(code, str(DOCS), "exec"), module.__dict__)  # noqa: S102 - our own docs
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("tool_calls call_") and printed[1].startswith("call 0 call_")
    assert printed[2].startswith("tool_calls {0: {") and not any(line.startswith("call 1 ") for line in printed)
    assert isinstance(module.completion.choices[0].message.parsed, module.City)
    jsonschema.validate(json.loads(module.call.function.arguments), module.tools[0]["function"]["parameters"])
