"""Tools and reasoning for the offline ``LLM.chat(messages, tools=..., tool_choice=...)``.

The same plan (:mod:`pagoda.tools.plan`) and the same per-choice parser
(:class:`pagoda.tools.choice.ChoiceParser`) as the server's ``/v1/chat/completions``, so one
request gives the same calls offline and over HTTP. Each returned sequence is a
:class:`ChatCompletionOutput`: a ``CompletionOutput`` (``text`` is the raw output, as vLLM's) plus
the parsed ``content``, ``reasoning_content`` and ``tool_calls`` in OpenAI's shapes.

Defaults follow vLLM's offline ``LLM.chat``: ``tools`` without ``tool_choice`` and without a
``tool_parser`` only reach the chat template (the output is not parsed). With a ``tool_parser``
the default choice is ``"auto"``; an explicit ``"auto"`` without one is a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Optional, Union

from pagoda.interfaces.reasoning_parser import ReasoningParser
from pagoda.interfaces.tool_parser import ToolParser
from pagoda.outputs import CompletionOutput, RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda.tools.choice import ChoiceParser
from pagoda.tools.plan import (ToolChoice, ToolPlan, apply_plan, choice_parser_factory, parser_class, plan_tools,
                               template_arguments)

OFFLINE_PARSER_HINT = "pass tool_parser=NAME to LLM.chat"


@dataclass
class ChatCompletionOutput(CompletionOutput):
    """A chat sequence with its parsed message: ``content`` (None when the reply is only tool calls),
    ``reasoning_content`` (with a reasoning parser) and ``tool_calls`` (OpenAI's
    ``[{"id", "type": "function", "function": {"name", "arguments": JSON text}}]``, or None)."""

    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[dict]] = None

    @property
    def message(self) -> dict:
        """The reply as an OpenAI assistant message (append it to the conversation to go on)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning_content is not None:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


ParserSpec = Union[str, type, None]


@dataclass
class ChatTools:
    """The tool handling of one ``LLM.chat`` call (all its conversations)."""

    plan: ToolPlan
    reasoning_cls: Optional[type[ReasoningParser]]
    tokenizer: Any
    parse: bool  # False: outputs as plain CompletionOutputs (no tools, no reasoning parser)

    @classmethod
    def build(cls, tokenizer, tools: Optional[list[dict]], tool_choice: ToolChoice, parallel_tool_calls: bool,
              tool_parser: ParserSpec, reasoning_parser: ParserSpec) -> "ChatTools":
        """Raises ValueError (a ``ToolRequestError`` naming the argument) for a choice it cannot honour,
        UnknownChoiceError for an unknown parser name."""
        tool_cls = _parser(ToolParser, "tool_parser", tool_parser)
        reasoning_cls = _parser(ReasoningParser, "reasoning_parser", reasoning_parser)
        if tool_choice is None and tools and tool_cls is None:
            tool_choice = "none"  # vLLM's offline default: the template sees the tools, the output is text
        plan = plan_tools(tools, tool_choice, parallel_tool_calls, tool_cls, OFFLINE_PARSER_HINT)
        return cls(plan, reasoning_cls, tokenizer, parse=bool(tools) or reasoning_cls is not None)

    def sampling_params(self, params: SamplingParams) -> SamplingParams:
        """``params`` with the plan's grammar (tool_choice required / named) and detokenization."""
        return apply_plan(params, self.plan)

    def outputs(self, outputs: list[RequestOutput], params: list[SamplingParams]) -> list[RequestOutput]:
        """``outputs`` (one per conversation, generated with ``params``) with parsed sequences."""
        if not self.parse:
            return outputs
        for output, p in zip(outputs, params):
            make_parser = choice_parser_factory(self.plan, self.reasoning_cls, self.tokenizer, p.guided_decoding)
            output.outputs = [_parsed(sequence, make_parser) for sequence in output.outputs]
        return outputs


def _parser(base: type, kind: str, spec: ParserSpec) -> Optional[type]:
    if spec is None or isinstance(spec, str):
        return parser_class(kind, spec)
    if isinstance(spec, type) and issubclass(spec, base):
        return spec
    raise TypeError(f"{kind} must be a registered name or a {base.__name__} subclass, got {spec!r}")


def _parsed(sequence: CompletionOutput, make_parser: Optional[Callable[[], ChoiceParser]]) -> ChatCompletionOutput:
    values = {f.name: getattr(sequence, f.name) for f in fields(CompletionOutput)}
    if make_parser is None:
        return ChatCompletionOutput(**values, content=sequence.text)
    message, _ = make_parser().message(sequence.text, sequence.finish_reason)
    return ChatCompletionOutput(**values, content=message["content"], reasoning_content=message.get("reasoning_content"),
                                tool_calls=message.get("tool_calls"))


def template_messages(conversation: list[dict]) -> list[dict]:
    """The conversation as chat templates expect it, as the server renders it: an assistant turn's
    ``tool_calls`` arguments as dicts (OpenAI sends JSON text), its ``content`` "" rather than None."""
    out = []
    for message in conversation:
        if isinstance(message, dict) and message.get("tool_calls"):
            calls = [{**call, "function": {**call["function"],
                                           "arguments": template_arguments(call["function"].get("arguments", "{}"))}}
                     if isinstance(call, dict) and isinstance(call.get("function"), dict) else call
                     for call in message["tool_calls"]]
            message = {**message, "content": message.get("content") or "", "tool_calls": calls}
        out.append(message)
    return out
