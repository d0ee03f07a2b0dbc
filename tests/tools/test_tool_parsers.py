"""The built-in tool-call and reasoning parsers on known outputs: every way of streaming an output
(whole, character by character, random pieces) must report the same content and calls."""

from __future__ import annotations

import json
import sys

import jsonschema
import pytest
from parser_helpers import run_reasoning, run_tools, splits

from pagoda.hookspecs import hookimpl
from pagoda.interfaces import ReasoningParser, ReasoningPiece, TextPiece, ToolParser
from pagoda.plugins.manager import PluginManager
from pagoda.reasoning.think import DeepSeekR1ReasoningParser, Qwen3ReasoningParser
from pagoda.tools.forced import NamedCallReader, RequiredCallsReader, named_schema, required_schema
from pagoda.tools.hermes import HermesToolParser
from pagoda.tools.llama3_json import Llama3JsonToolParser
from pagoda.tools.mistral import MistralToolParser

WEATHER = '{"city": "Paris", "days": [1, 2], "note": "a } and a \\" inside"}'

TOOL_CASES = [
    # (parser, output, content, [(name, arguments)])
    (HermesToolParser, f'Checking.\n<tool_call>\n{{"name": "get_weather", "arguments": {WEATHER}}}\n</tool_call>',
     "Checking.\n", [("get_weather", WEATHER)]),
    (HermesToolParser, '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n'
                       '{"arguments": {"x": 1}, "name": "b"}\n</tool_call>', "", [("a", "{}"), ("b", '{"x": 1}')]),
    (HermesToolParser, '<tool_call>{"name": "no_args"}</tool_call>', "", [("no_args", "{}")]),
    (HermesToolParser, 'Use <tool or <tool_call> only when needed.', "Use <tool or <tool_call> only when needed.", []),
    (HermesToolParser, "a <tool_call> {not json} </tool_call>", "a <tool_call> {not json} </tool_call>", []),
    (HermesToolParser, '<tool_call>{"name": "cut", "arguments": {"x": ', "", [("cut", '{"x": ')]),
    (HermesToolParser, "<tool_call>{\"na", '<tool_call>{"na', []),
    (Llama3JsonToolParser, f'{{"name": "get_weather", "parameters": {WEATHER}}}', "", [("get_weather", WEATHER)]),
    (Llama3JsonToolParser, '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"y": [true]}}',
     "", [("a", "{}"), ("b", '{"y": [true]}')]),
    (Llama3JsonToolParser, "  The answer is 4.", "  The answer is 4.", []),
    (Llama3JsonToolParser, '{"answer": 4}', '{"answer": 4}', []),
    (Llama3JsonToolParser, '{"name": "f", "parameters": {"a": 1}} and then prose', "", [("f", '{"a": 1}')]),
    (MistralToolParser, f'Sure.[TOOL_CALLS][{{"name": "get_weather", "arguments": {WEATHER}}}, '
                        '{"name": "b", "arguments": "{\\"z\\": 2}"}]', "Sure.", [("get_weather", WEATHER), ("b", '{"z": 2}')]),
    (MistralToolParser, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]b[CALL_ID]a1b2c3d4e[ARGS]{}',
     "", [("get_weather", '{"city": "Paris"}'), ("b", "{}")]),
    (MistralToolParser, "I cannot [TOOL_CALLS] that.", "I cannot [TOOL_CALLS] that.", []),
    (MistralToolParser, "Plain [TOOL answer", "Plain [TOOL answer", []),
]


@pytest.mark.parametrize("parser, output, content, calls", TOOL_CASES)
def test_tool_parsers_agree_on_every_split(parser, output, content, calls) -> None:
    for number, chunks in enumerate(splits(output)):
        assert run_tools(parser, chunks) == (content, calls), f"split {number}: {chunks}"


def test_arguments_stream_before_the_call_ends_and_markers_are_held_back() -> None:
    parser = HermesToolParser()
    assert parser.feed("Hi <tool_") == [TextPiece("Hi ")]  # maybe a marker: held back
    events = parser.feed('call>{"name": "f", "arguments": {"a": "x')
    assert [type(e).__name__ for e in events] == ["CallStarted", "ArgumentsPiece"]
    assert events[1].text == '{"a": "x'  # the fragment so far, before the object closes
    assert parser.feed('y"}}</tool_call>')[0].text == 'y"}'  # the call's closing brace is not an argument


def test_named_and_required_readers_turn_guided_output_into_calls() -> None:
    for chunks in splits('{"city": "Oslo"}'):
        assert run_tools(lambda: NamedCallReader("get_weather"), chunks) == ("", [("get_weather", '{"city": "Oslo"}')])
    output = '[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]'
    for chunks in splits(output):
        assert run_tools(RequiredCallsReader, chunks) == ("", [("a", '{"x": 1}'), ("b", "{}")])


def test_required_schema_accepts_calls_of_the_tools_only() -> None:
    item = {"type": "object", "properties": {"item": {"$ref": "#/$defs/Item"}, "next": {"$ref": "#"}},
            "required": ["item"], "$defs": {"Item": {"type": "integer", "minimum": 1}}}
    tools = [("f", {"type": "object", "properties": {"a": {"enum": ["x", "y"]}}, "required": ["a"]}), ("g", item), ("h", None)]
    schema = required_schema(tools, parallel=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    good = [{"name": "f", "arguments": {"a": "x"}}, {"name": "g", "arguments": {"item": 2, "next": {"item": 3}}},
            {"name": "h", "arguments": {"anything": True}}]
    jsonschema.validate(good, schema)
    for bad in ([], [{"name": "f", "arguments": {"a": "z"}}], [{"name": "g", "arguments": {"item": 0}}],
                [{"name": "nope", "arguments": {}}], [{"name": "g", "arguments": {"item": 1, "next": {"item": 0}}}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    single = required_schema(tools, parallel=False)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(good[:2], single)
    assert named_schema(None) == {"type": "object"} and tools[1][1]["$defs"]  # the tools' schemas are not changed


REASONING_CASES = [
    (DeepSeekR1ReasoningParser, "<think>\nStep 1.</think>\n\nThe answer.", ("\nStep 1.", "The answer.")),
    (DeepSeekR1ReasoningParser, "Step 1 (the prompt opened <think>).</think>Done", ("Step 1 (the prompt opened <think>).", "Done")),
    (DeepSeekR1ReasoningParser, "cut off while thinking <", ("cut off while thinking <", "")),
    (Qwen3ReasoningParser, "<think>hm</think>\n\nYes. </think> stays", ("hm", "Yes. </think> stays")),
    (Qwen3ReasoningParser, "No thinking here.", ("", "No thinking here.")),
    (Qwen3ReasoningParser, "<thin", ("", "<thin")),
]


@pytest.mark.parametrize("parser, output, expected", REASONING_CASES)
def test_reasoning_parsers_agree_on_every_split(parser, output, expected) -> None:
    for chunks in splits(output):
        assert run_reasoning(parser, chunks) == expected, chunks


def test_the_kinds_register_the_builtins_and_plugins_add_their_own() -> None:
    class Upper(ToolParser):
        def feed(self, text: str):
            return [TextPiece(text.upper())]

    class Everything(ReasoningParser):
        def feed(self, text: str) -> ReasoningPiece:
            return ReasoningPiece(reasoning=text)

    class Plugin:
        @hookimpl
        def register_tool_parsers(self, register) -> None:
            register("upper", Upper)

        @hookimpl
        def register_reasoning_parsers(self, register) -> None:
            register("everything", Everything)

    class Bad:
        @hookimpl
        def register_tool_parsers(self, register) -> None:
            register("bad", dict)

    pm = PluginManager(modules={"fake": Plugin(), "bad": Bad()}, entry_points=False, allow=None, block="")
    assert pm.registry("tool_parser").names() == ["hermes", "llama3_json", "mistral", "upper"]
    assert pm.registry("reasoning_parser").names() == ["deepseek_r1", "everything", "qwen3"]
    assert "must be a subclass of pagoda.interfaces.ToolParser" in pm.plugins["bad"].errors[0]
    with pytest.raises(ValueError, match=r"Unknown tool-call parser 'hermez'. Available: hermes, llama3_json, "
                                         r"mistral, upper. Did you mean 'hermes'\?"):
        pm.registry("tool_parser").get("hermez")


def test_call_ids_follow_openai_and_mistral() -> None:
    assert HermesToolParser().new_call_id().startswith("call_") and len(HermesToolParser().new_call_id()) == 29
    mistral_id = MistralToolParser().new_call_id()
    assert len(mistral_id) == 9 and mistral_id.isalnum()
    assert not MistralToolParser.skip_special_tokens and HermesToolParser.skip_special_tokens
    assert json.loads(run_tools(Llama3JsonToolParser, [' {"name": "f"}'])[1][0][1]) == {}


def test_the_plugin_template_renders_a_working_tool_parser(tmp_path, monkeypatch) -> None:
    import importlib

    from pagoda.cli.scaffold import placeholders, write_package

    values = placeholders("my-format", "tool_parser")
    write_package(tmp_path / "pagoda-my-format", values)
    monkeypatch.syspath_prepend(str(tmp_path / "pagoda-my-format"))
    monkeypatch.syspath_prepend(str(tmp_path / "pagoda-my-format" / "tests"))
    tests = importlib.import_module("test_pagoda_my_format")
    try:
        tests.test_hook_registers_the_parser()
        tests.test_whole_and_streamed_output_give_the_same_call()
        assert values["flag"] == "--tool-call-parser" and values["class"] == "MyFormatToolParser"
    finally:
        for name in [n for n in sys.modules if n.startswith(("pagoda_my_format", "test_pagoda_my_format"))]:
            del sys.modules[name]
