"""Helpers of the tool-calling server tests: a chat template that renders tools (Hermes/Qwen style,
in SmolLM2's ``<|im_start|>`` tokens), a tiny random model carrying it, and an engine that answers
with scripted text (to test the parsers over HTTP on outputs a random model would never write)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import AsyncIterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guided"))
from guided_models import make_tiny_smollm_vocab_model  # noqa: E402

from pagoda.messages import EngineInfo  # noqa: E402
from pagoda.outputs import CompletionOutput, RequestOutput  # noqa: E402
from pagoda.server.async_engine import AsyncEngine  # noqa: E402

# The tools, their argument schemas and the user turn the tool-calling tests share.
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "unit": {"enum": ["c", "f"]}},
           "required": ["city", "unit"]}
TIME = {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}}, "required": ["zone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": TIME}}]
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
MESSAGES = [{"role": "user", "content": "Weather in Oslo?"}]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "tools.md"

# What Qwen2.5's template does with tools, tool calls and tool results, kept short (the tiny
# model's context is 512 tokens).
TOOLS_TEMPLATE = """
{%- if tools %}
{{- '<|im_start|>system\\nFunctions:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\nCall one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call><|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'assistant' and message.tool_calls %}
{{- '<|im_start|>assistant\\n' + message.content }}
{%- for call in message.tool_calls %}
{{- '<tool_call>' + ({'name': call.function.name, 'arguments': call.function.arguments} | tojson) + '</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>' + message.content + '</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
""".strip()


def make_tool_chat_model(path: Path) -> str:
    """The tiny random Llama over SmolLM2's vocabulary, its chat template replaced by ``TOOLS_TEMPLATE``."""
    make_tiny_smollm_vocab_model(path)
    (path / "chat_template.jinja").write_text(TOOLS_TEMPLATE)
    return str(path)


def start_tool_server(folder: Path, **options):
    """A server of the tool model in ``folder`` (made there) with the hermes tool-call parser; ``options``
    go to ``start_server``."""
    from server_helpers import engine_config, start_server

    config = engine_config(make_tool_chat_model(folder), max_model_len=512, kv_cache_memory=64 << 20)
    return start_server(config, **{"tool_parser": "hermes", **options})


class ScriptedEngine(AsyncEngine):
    """Answers each request with the next scripted output, delivered in the given pieces (one
    per engine step); records each request's prompt and sampling parameters."""

    def __init__(self, tokenizer) -> None:
        info = EngineInfo(max_model_len=4096, vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                          num_kv_blocks=256, block_size=16, description="scripted")
        super().__init__(SimpleNamespace(info=info, engine_stats={}), tokenizer)
        self.script: list[list[str]] = []
        self.requests: list[SimpleNamespace] = []

    def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def generate(self, request_id: str, prompt_token_ids: list[int], params, prompt: str | None = None,
                       priority: int = 0, **_) -> AsyncIterator[RequestOutput]:
        self.requests.append(SimpleNamespace(prompt=prompt, params=params))
        pieces = self.script.pop(0)
        for number, piece in enumerate(pieces):
            last = number == len(pieces) - 1
            output = CompletionOutput(0, piece, [7], finish_reason="stop" if last else None)
            yield RequestOutput(request_id, prompt, prompt_token_ids, [output], finished=last)
