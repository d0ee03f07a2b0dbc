"""Tool calling offline (``LLM.chat(tools=..., tool_choice=...)``) against the server's answers to the
same requests: the tiny random Llama over SmolLM2's vocabulary with a tools-aware chat template, served
and loaded in-process; forced calls validate with jsonschema and equal the server's, token for token."""

from __future__ import annotations

import json
import re

import jsonschema
import openai
import pytest
from server_helpers import API_KEY, MODEL_NAME, engine_config, start_server
from tool_helpers import DOCS, MESSAGES, SCHEMAS, TOOLS, make_tool_chat_model

from pagoda import LLM, SamplingParams
from pagoda.errors import UnknownChoiceError
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.outputs import CompletionOutput, RequestOutput
from pagoda.tools.offline import ChatCompletionOutput, ChatTools
from pagoda.tools.plan import ToolRequestError

HERMES_OUTPUT = r'Sure\.<tool_call>\{"name": "get_weather", "arguments": \{"city": "[a-z]{1,4}", "unit": "c"\}\}</tool_call>'


@pytest.fixture(scope="module")
def model_path(tmp_path_factory) -> str:
    return make_tool_chat_model(tmp_path_factory.mktemp("tiny-tool-chat-offline"))


@pytest.fixture(scope="module")
def client(model_path):
    running = start_server(engine_config(model_path, max_model_len=512, kv_cache_memory=64 << 20), tool_parser="hermes")
    yield openai.OpenAI(base_url=running.url + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    running.stop()


@pytest.fixture(scope="module")
def llm(model_path):
    llm = LLM(model_path, block_size=8, max_model_len=512, kv_cache_memory=64 << 20)
    yield llm
    llm.shutdown()


def calls_of(tool_calls) -> list[tuple[str, str]]:
    """(name, arguments JSON text) of each call, each checked against its tool's schema."""
    out = []
    for call in tool_calls:
        call = call if isinstance(call, dict) else call.model_dump()
        assert call["type"] == "function" and re.fullmatch(r"call_[A-Za-z0-9]{24}", call["id"])
        jsonschema.validate(json.loads(call["function"]["arguments"]), SCHEMAS[call["function"]["name"]])
        out.append((call["function"]["name"], call["function"]["arguments"]))
    return out


def test_a_named_tool_choice_offline_equals_the_server(llm, client) -> None:
    choice = {"type": "function", "function": {"name": "get_time"}}
    offline = llm.chat(MESSAGES, SamplingParams(n=2, seed=5, temperature=1.0, max_tokens=80), tools=TOOLS,
                       tool_choice=choice, use_tqdm=False)[0].outputs
    served = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, tool_choice=choice, n=2,
                                            seed=5, temperature=1.0, max_tokens=80).choices
    for mine, theirs in zip(offline, served):
        assert isinstance(mine, ChatCompletionOutput) and mine.content is None and mine.finish_reason == "stop"
        assert calls_of(mine.tool_calls) == calls_of(theirs.message.tool_calls)
        assert mine.message == {"role": "assistant", "content": None, "tool_calls": mine.tool_calls}
        assert json.loads(mine.text) == json.loads(mine.tool_calls[0]["function"]["arguments"])  # the raw output


@pytest.mark.parametrize("parallel, sampling", [(False, {"temperature": 0.0}), (True, {"temperature": 1.0, "seed": 11})])
def test_required_tool_choice_offline_equals_the_server(llm, client, parallel, sampling) -> None:
    offline = llm.chat(MESSAGES, SamplingParams(max_tokens=150, **sampling), tools=TOOLS, use_tqdm=False,
                       tool_choice="required", parallel_tool_calls=parallel)[0].outputs[0]
    served = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                            parallel_tool_calls=parallel, max_tokens=150, **sampling).choices[0]
    assert served.finish_reason == "tool_calls" and offline.finish_reason == "stop"
    assert offline.tool_calls and calls_of(offline.tool_calls) == calls_of(served.message.tool_calls)
    assert offline.content is None is served.message.content
    assert parallel or len(offline.tool_calls) == 1


def test_auto_with_the_hermes_parser_offline_equals_the_server(llm, client) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=80, guided_decoding=GuidedDecodingParams(regex=HERMES_OUTPUT))
    out = llm.chat(MESSAGES, params, tools=TOOLS, tool_parser="hermes", use_tqdm=False)[0].outputs[0]
    served = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS, max_tokens=80,
                                            temperature=0.0, extra_body={"guided_regex": HERMES_OUTPUT}).choices[0]
    assert out.content == served.message.content == "Sure." and out.text.startswith("Sure.<tool_call>")
    assert calls_of(out.tool_calls) == calls_of(served.message.tool_calls)


def test_tools_without_a_parser_reach_the_template_and_the_output_stays_text(llm) -> None:
    out = llm.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=5), tools=TOOLS, use_tqdm=False)[0]
    assert '"name": "get_time"' in out.prompt  # vLLM's offline default: the template sees the tools
    assert out.outputs[0].tool_calls is None and out.outputs[0].content == out.outputs[0].text
    plain = llm.chat(MESSAGES, SamplingParams(temperature=0.0, max_tokens=5), use_tqdm=False)[0]
    assert type(plain.outputs[0]) is CompletionOutput and "get_time" not in plain.prompt  # no tools: as before


def test_history_with_calls_renders_like_the_server(llm) -> None:
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 3}'}]
    prompt = llm.chat(history, SamplingParams(max_tokens=2), tools=TOOLS, tool_choice="none", use_tqdm=False)[0].prompt
    assert '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>' in prompt  # a dict
    assert history[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Oslo"}'  # the caller's list untouched


@pytest.mark.parametrize("options, param, needle", [
    ({"tool_choice": "auto"}, "tool_choice", "pass tool_parser=NAME to LLM.chat (available: hermes, llama3_json"),
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "'nope', which is not in tools"),
    ({"tool_choice": "required", "tools": None}, "tool_choice", "needs the functions it may call"),
    ({"tool_choice": "maybe"}, "tool_choice", "tool_choice must be"),
    ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools", "tools[0] must be"),
    ({"tools": [{"type": "function", "function": {"name": "f", "strict": True}}], "tool_parser": "hermes"}, "tools",
     "strict"),
])
def test_tool_requests_it_cannot_honour_raise_the_servers_error(llm, options, param, needle) -> None:
    with pytest.raises(ToolRequestError) as caught:
        llm.chat(MESSAGES, SamplingParams(max_tokens=2), use_tqdm=False, **{"tools": TOOLS, **options})
    assert caught.value.param == param and needle in str(caught.value) and isinstance(caught.value, ValueError)


def test_a_forced_choice_and_guided_decoding_together_are_refused(llm) -> None:
    params = SamplingParams(max_tokens=2, guided_decoding=GuidedDecodingParams(json_object=True))
    with pytest.raises(ValueError, match="send only one of them"):
        llm.chat(MESSAGES, params, tools=TOOLS, tool_choice="required", use_tqdm=False)
    with pytest.raises(UnknownChoiceError, match="hermes"):
        llm.chat(MESSAGES, SamplingParams(max_tokens=2), tools=TOOLS, tool_parser="hermez", use_tqdm=False)


def test_reasoning_and_calls_are_parsed_from_a_finished_output() -> None:
    """The parsing step alone, on an output a random model would not write."""
    text = '<think>Cold?</think>Let me look.<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    tools = ChatTools.build(None, TOOLS, None, True, "hermes", "qwen3")
    result = RequestOutput("r", "p", [1], [CompletionOutput(0, text, [7, 8], finish_reason="stop")], finished=True)
    out = tools.outputs([result], [SamplingParams()])[0].outputs[0]
    assert (out.reasoning_content, out.content, out.text, out.token_ids) == ("Cold?", "Let me look.", text, [7, 8])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in out.tool_calls] == [
        ("get_weather", {"city": "Oslo"})]
    assert out.message["reasoning_content"] == "Cold?" and out.message["tool_calls"] == out.tool_calls


def test_the_offline_example_of_the_docs_runs(model_path, llm, capsys, monkeypatch) -> None:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S) if "from pagoda import LLM" in b]
    assert len(blocks) == 1
    monkeypatch.setattr("pagoda.LLM", lambda *args, **kwargs: llm, raising=False)  # the loaded tiny model
    namespace: dict = {}
    exec(compile(blocks[0], str(DOCS), "exec"), namespace)  # noqa: S102 - our own docs
    name, arguments = capsys.readouterr().out.splitlines()[0].split(" ", 1)
    assert name == "get_weather" and namespace["call"]["function"]["name"] == "get_weather"
    jsonschema.validate(json.loads(namespace["call"]["function"]["arguments"]), namespace["tools"][0]["function"]["parameters"])
    assert [m["role"] for m in namespace["messages"]] == ["user", "assistant", "tool"]
