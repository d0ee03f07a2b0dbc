"""Reasoning parsers: split a reasoning model's output into its reasoning and its answer.

Models such as DeepSeek-R1 and Qwen3 think first (``<think>...</think>``) and answer after.
A :class:`ReasoningParser` reads the output piece by piece and says which part of each piece
is reasoning (``message.reasoning_content``, streamed as ``delta.reasoning_content``) and
which is the answer (``content``, where a tool parser, if any, looks for tool calls).
One instance reads one choice's output, from its start.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from pagoda.interfaces.base import Capability


@dataclass(frozen=True)
class ReasoningPiece:
    """What a piece of output adds to the reasoning and to the answer."""

    reasoning: str = ""
    content: str = ""

    def __bool__(self) -> bool:
        return bool(self.reasoning or self.content)


class ReasoningParser(Capability, ABC):
    """Splits one choice's output into reasoning and content, as it streams."""

    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer = tokenizer

    @abstractmethod
    def feed(self, text: str) -> ReasoningPiece:
        """Read the next piece of output text; markers (``<think>``) are dropped, a marker's
        possible beginning at the end of ``text`` is held back."""

    def finish(self) -> ReasoningPiece:
        """The output ended: return what was held back (default: nothing)."""
        return ReasoningPiece()
