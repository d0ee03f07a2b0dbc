"""``<think>...</think>`` reasoning blocks.

- ``deepseek_r1``: the output is reasoning until ``</think>`` (the opening ``<think>`` is often in
  the prompt already, so the output may not repeat it); without ``</think>`` all of it is reasoning
  (the model was cut off while thinking).
- ``qwen3``: reasoning only inside a ``<think>`` block that opens the output; an output that does
  not start with ``<think>`` (thinking switched off) is all content.

The markers are dropped, and so is the whitespace between ``</think>`` and the answer.
"""

from __future__ import annotations

from typing import ClassVar

from pagoda.interfaces.reasoning_parser import ReasoningParser, ReasoningPiece
from pagoda.tools.marked import held_back

START, END = "<think>", "</think>"


class ThinkParser(ReasoningParser):
    """Splits at ``</think>``; ``reasoning_first`` says what an output without ``<think>`` starts with."""

    reasoning_first: ClassVar[bool] = True

    def __init__(self, tokenizer=None) -> None:
        super().__init__(tokenizer)
        self._pending = ""
        self._stage = "start"  # start, reasoning, answer_start, answer

    def feed(self, text: str) -> ReasoningPiece:
        self._pending += text
        reasoning, content = [], []
        while self._advance(reasoning, content):
            pass
        return ReasoningPiece("".join(reasoning), "".join(content))

    def finish(self) -> ReasoningPiece:
        rest, self._pending = self._pending, ""
        if self._stage == "reasoning" or (self._stage == "start" and self.reasoning_first):
            return ReasoningPiece(reasoning=rest.lstrip() if self._stage == "start" else rest)
        return ReasoningPiece(content=rest if self._stage != "answer_start" else "")

    def _advance(self, reasoning: list[str], content: list[str]) -> bool:
        if self._stage == "start":
            return self._read_start()
        if self._stage == "reasoning":
            return self._read_reasoning(reasoning)
        if self._stage == "answer_start":
            self._pending = self._pending.lstrip()
            if not self._pending:
                return False
            self._stage = "answer"
        content.append(self._pending)
        self._pending = ""
        return False

    def _read_start(self) -> bool:
        head = self._pending.lstrip()
        if head.startswith(START):
            self._pending, self._stage = head[len(START) :], "reasoning"
            return True
        if not head or START.startswith(head):
            return False  # nothing yet, or maybe "<think>"
        self._stage = "reasoning" if self.reasoning_first else "answer"
        return True

    def _read_reasoning(self, reasoning: list[str]) -> bool:
        found = self._pending.find(END)
        end = found if found >= 0 else len(self._pending) - held_back(self._pending, END)
        if end:
            reasoning.append(self._pending[:end])
        if found < 0:
            self._pending = self._pending[end:]
            return False
        self._pending, self._stage = self._pending[found + len(END) :], "answer_start"
        return True


class DeepSeekR1ReasoningParser(ThinkParser):
    description = "DeepSeek-R1 style: reasoning until </think> (an opening <think> is optional)"
    reasoning_first = True


class Qwen3ReasoningParser(ThinkParser):
    description = "Qwen3 style: reasoning inside a <think>...</think> block that opens the output"
    reasoning_first = False
