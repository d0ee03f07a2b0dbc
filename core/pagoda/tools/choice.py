"""One chat choice's output, parsed: reasoning (a reasoning parser), then tool calls (a tool parser).

:class:`ChoiceParser` reads the choice's text as it streams and answers OpenAI's message deltas
(``reasoning_content``, ``content``, ``tool_calls``); at the end it holds the whole message. A
non-streamed reply (the server's, or ``LLM.chat``'s) feeds the whole text through the same code,
so both agree. The server turns the deltas into chunks (``pagoda.server.chat_output``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from pagoda.interfaces.reasoning_parser import ReasoningParser, ReasoningPiece
from pagoda.interfaces.tool_parser import CallStarted, TextPiece, ToolEvent, ToolParser


@dataclass
class ParsedCall:
    id: str
    name: str
    arguments: str = ""

    def as_dict(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class ChoiceParser:
    """Reasoning, content and tool calls of one choice.

    ``tool_names``: the request's functions (a non-streamed reply whose calls name another, or
    whose arguments are not a JSON object, is returned as plain content instead).
    ``single_call``: ``parallel_tool_calls`` is false, so calls after the first are dropped.
    """

    def __init__(self, reasoning: Optional[ReasoningParser], tools: Optional[ToolParser],
                 tool_names: frozenset[str] = frozenset(), single_call: bool = False) -> None:
        self.reasoning = reasoning
        self.tools = tools
        self.tool_names = tool_names
        self.single_call = single_call
        self.reasoning_parts: list[str] = []
        self.answer_parts: list[str] = []  # the text after reasoning, before tool parsing
        self.content_parts: list[str] = []
        self.calls: list[ParsedCall] = []

    def feed(self, text: str) -> list[dict]:
        """The deltas that ``text`` (the next piece of output) completes."""
        piece = self.reasoning.feed(text) if self.reasoning is not None else ReasoningPiece(content=text)
        return self._deltas(piece, final=False)

    def finish(self) -> list[dict]:
        """The deltas of what the parsers held back until the end."""
        piece = self.reasoning.finish() if self.reasoning is not None else ReasoningPiece()
        return self._deltas(piece, final=True)

    def message(self, text: str, finish_reason: Optional[str]) -> tuple[dict, Optional[str]]:
        """The whole message of a non-streamed choice, and its finish reason."""
        self.feed(text)
        self.finish()
        calls = self.calls if self._calls_valid() else []
        content = "".join(self.answer_parts if self.calls and not calls else self.content_parts)
        message = {"role": "assistant", "content": content if not calls or content.strip() else None}
        if self.reasoning is not None:
            message["reasoning_content"] = "".join(self.reasoning_parts) or None
        if calls:
            message["tool_calls"] = [call.as_dict() for call in calls]
        return message, self.finish_reason(finish_reason, bool(calls))

    @staticmethod
    def finish_reason(finish_reason: Optional[str], called: bool) -> Optional[str]:
        return "tool_calls" if called and finish_reason == "stop" else finish_reason

    def _calls_valid(self) -> bool:
        return all(_is_json_object(c.arguments) and (not self.tool_names or c.name in self.tool_names)
                   for c in self.calls)

    def _deltas(self, piece: ReasoningPiece, final: bool) -> list[dict]:
        deltas: list[dict] = []
        if piece.reasoning:
            self.reasoning_parts.append(piece.reasoning)
            deltas.append({"reasoning_content": piece.reasoning})
        for event in self._tool_events(piece.content, final):
            _add_delta(deltas, self._apply(event))
        return deltas

    def _tool_events(self, answer: str, final: bool) -> list[ToolEvent]:
        self.answer_parts.append(answer)
        if self.tools is None:
            return [TextPiece(answer)] if answer else []
        events = self.tools.feed(answer) if answer else []
        if final:
            events += self.tools.finish()
        if self.single_call:
            events = [e for e in events if isinstance(e, TextPiece) or e.index == 0]
        return events

    def _apply(self, event: ToolEvent) -> dict:
        """Record ``event``; return its delta."""
        if isinstance(event, TextPiece):
            self.content_parts.append(event.text)
            return {"content": event.text}
        if isinstance(event, CallStarted):
            call = ParsedCall(self.tools.new_call_id(), event.name)
            self.calls.append(call)
            return {"tool_calls": [{"index": event.index, "id": call.id, "type": "function",
                                    "function": {"name": call.name, "arguments": ""}}]}
        self.calls[event.index].arguments += event.text
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.text}}]}


def _add_delta(deltas: list[dict], delta: dict) -> None:
    """Append ``delta``, merged into the previous one when both add text to the same thing."""
    last = deltas[-1] if deltas else None
    if last is not None and "content" in delta and set(last) == {"content"}:
        last["content"] += delta["content"]
        return
    if last is not None and _is_arguments(delta) and _is_arguments(last):
        mine, previous = delta["tool_calls"][0], last["tool_calls"][0]
        if mine["index"] == previous["index"]:
            previous["function"]["arguments"] += mine["function"]["arguments"]
            return
    deltas.append(delta)


def _is_arguments(delta: dict) -> bool:
    calls = delta.get("tool_calls")
    return bool(calls) and "id" not in calls[0]


def _is_json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
