"""One choice's parsed output as OpenAI shapes: the streamed deltas add up to the whole message."""

from __future__ import annotations

import json

from parser_helpers import splits

from pagoda.reasoning.think import Qwen3ReasoningParser
from pagoda.server.chat_output import ChoiceParser, stream_choices
from pagoda.tools.hermes import HermesToolParser

OUTPUT = ('<think>Paris, probably.</think>\n\nLet me check.<tool_call>\n{"name": "get_weather", "arguments": '
          '{"city": "Paris"}}\n</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>')
NAMES = frozenset({"get_weather", "get_time"})


def parser(**options) -> ChoiceParser:
    return ChoiceParser(Qwen3ReasoningParser(), HermesToolParser(), NAMES, **options)


def streamed(chunks: list[str], **options) -> list[dict]:
    """The ``choices`` entries of a stream whose engine deltas carry ``chunks``."""
    choice = parser(**options)
    entries = []
    for number, chunk in enumerate(chunks):
        entries += stream_choices(choice, 0, chunk, "stop" if number == len(chunks) - 1 else None, None)
    return entries


def accumulate(entries: list[dict]) -> dict:
    """Join deltas the way OpenAI's SDK does: text appended, tool calls merged by index."""
    message: dict = {"content": "", "reasoning_content": "", "tool_calls": []}
    for entry in entries:
        delta = entry["delta"]
        for key in ("content", "reasoning_content"):
            message[key] += delta.get(key) or ""
        for call in delta.get("tool_calls") or []:
            if "id" in call:
                assert call["index"] == len(message["tool_calls"]) and call["function"]["arguments"] == ""
                assert call["type"] == "function" and call["id"].startswith("call_")
                message["tool_calls"].append({"id": call["id"], "name": call["function"]["name"], "arguments": ""})
            else:
                assert set(call) == {"index", "function"} and set(call["function"]) == {"arguments"}
                message["tool_calls"][call["index"]]["arguments"] += call["function"]["arguments"]
    return message


def test_the_whole_message_has_reasoning_content_and_calls() -> None:
    message, finish = parser().message(OUTPUT, "stop")
    assert finish == "tool_calls"
    assert message["reasoning_content"] == "Paris, probably." and message["content"] == "Let me check."
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in message["tool_calls"])


def test_every_stream_adds_up_to_the_whole_message() -> None:
    whole, _ = parser().message(OUTPUT, "stop")
    for chunks in splits(OUTPUT, seed=3):
        entries = streamed(chunks)
        assert entries[-1] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
        assert all(e["finish_reason"] is None for e in entries[:-1])
        got = accumulate(entries)
        assert got["content"] == whole["content"] and got["reasoning_content"] == whole["reasoning_content"]
        assert [(c["name"], c["arguments"]) for c in got["tool_calls"]] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in whole["tool_calls"]]


def test_a_call_streams_as_openai_does() -> None:
    entries = streamed(['<tool_call>{"name": "get_time", "arguments": {"tz"', ': "UTC"}}</tool_call>'])
    deltas = [e["delta"] for e in entries]
    call_id = deltas[0]["tool_calls"][0]["id"]
    assert deltas == [
        {"tool_calls": [{"index": 0, "id": call_id, "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"tz"'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ': "UTC"}'}}]},
        {},
    ]


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    message, _ = parser(single_call=True).message(OUTPUT, "stop")
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]
    assert len(accumulate(streamed(list(OUTPUT), single_call=True))["tool_calls"]) == 1


def test_unusable_calls_come_back_as_content() -> None:
    for output in ('<tool_call>{"name": "unknown_fn", "arguments": {}}</tool_call>',
                   '<tool_call>{"name": "get_time", "arguments": [1]}</tool_call>',
                   '<tool_call>{"name": "get_time", "arguments": {"tz": '):
        message, finish = parser().message(output, "length")
        assert message["content"] == output and "tool_calls" not in message and finish == "length"


def test_content_only_replies_keep_their_finish_reason_and_text() -> None:
    message, finish = parser().message("<think></think>Just text.", "stop")
    assert (message, finish) == ({"role": "assistant", "content": "Just text.", "reasoning_content": None}, "stop")
    entries = stream_choices(parser(), 0, "Hello", "length", {"content": []})
    assert entries[0]["logprobs"] == {"content": []} and entries[-1]["finish_reason"] == "length"
