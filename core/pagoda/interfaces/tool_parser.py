"""Tool-call parsers: find the tool calls in a model's text output, as it streams.

A chat model asked to call tools writes the calls in its own format (Hermes/Qwen
``<tool_call>{...}</tool_call>``, Llama-3 JSON, Mistral ``[TOOL_CALLS][...]``). A
:class:`ToolParser` reads that text piece by piece and turns it into events: plain text
(the message content), the start of a call (its name) and fragments of the call's arguments
(JSON text). The server sends the events as OpenAI's streamed deltas, or joins them into one
message; the same parser code serves both, so a streamed reply adds up to the whole one.

One parser instance reads one choice's output, from its start: it may keep state between
calls of :meth:`ToolParser.feed`.
"""

from __future__ import annotations

import secrets
import string
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from pagoda.interfaces.base import Capability

_ALPHANUMERIC = string.ascii_letters + string.digits


@dataclass(frozen=True)
class TextPiece:
    """Text of the message content (text the model wrote outside any tool call)."""

    text: str


@dataclass(frozen=True)
class CallStarted:
    """A new tool call, numbered from 0 in the order of the output; its arguments follow."""

    index: int
    name: str


@dataclass(frozen=True)
class ArgumentsPiece:
    """The next fragment of call ``index``'s arguments; the fragments join into a JSON object."""

    index: int
    text: str


ToolEvent = Union[TextPiece, CallStarted, ArgumentsPiece]


class ToolParser(Capability, ABC):
    """Reads one choice's output and reports text and tool calls as events.

    Contract: a call's :class:`CallStarted` comes before its :class:`ArgumentsPiece` events;
    calls start in index order (0, 1, ...); text that might still turn out to start a call
    (``"<tool_"``) is held back until it is known not to. Text after the calls may be dropped.
    """

    # False: the format's markers are special tokens that must stay in the text
    # (the server then detokenizes this request with skip_special_tokens=False).
    skip_special_tokens: ClassVar[bool] = True

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    @abstractmethod
    def feed(self, text: str) -> list[ToolEvent]:
        """Read the next piece of output text; return the events it completes."""

    def finish(self) -> list[ToolEvent]:
        """The output ended: return what was held back (default: nothing)."""
        return []

    def new_call_id(self) -> str:
        """The id of a new call: OpenAI's ``call_`` followed by 24 letters and digits."""
        return "call_" + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(24))
