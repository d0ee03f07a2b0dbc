"""A streamed reply as a sequence of blocks (reasoning, text, tool calls), the shape both the Responses
API's output items and Anthropic's content blocks take.

:class:`ReplyBlocks` reads the chat pipeline's message deltas and answers what happened to the blocks:
a block opens, grows by a piece, or closes (when the next one opens, or at the end). Whitespace before
tool calls is held back and dropped when a call follows (the whole reply drops it too); a reply that
called no tool always has a text block, empty if need be. So the streamed blocks add up to the blocks of
the whole reply (:func:`whole_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union


@dataclass(eq=False)
class Block:
    kind: str  # "reasoning", "text" or "tool_call"
    text: str = ""  # the reasoning, the text, or the call's arguments (JSON text)
    call_id: Optional[str] = None
    name: Optional[str] = None


@dataclass(frozen=True)
class Opened:
    block: Block


@dataclass(frozen=True)
class Grew:
    block: Block
    piece: str


@dataclass(frozen=True)
class Closed:
    block: Block


Change = Union[Opened, Grew, Closed]


class ReplyBlocks:
    """The blocks of one streamed reply."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.open: Optional[Block] = None
        self._held = ""  # whitespace text not yet sent (dropped if a tool call follows)
        self._calls: dict[int, Block] = {}  # the chat delta's call index -> its block

    def index(self, block: Block) -> int:
        return self.blocks.index(block)

    def feed(self, delta: dict) -> list[Change]:
        """What one chat message delta does to the blocks."""
        if "reasoning_content" in delta:
            return self._grow("reasoning", delta["reasoning_content"])
        if "content" in delta:
            return self._text(delta["content"])
        changes: list[Change] = []
        for call in delta.get("tool_calls", []):
            changes += self._call(call)
        return changes

    def finish(self) -> list[Change]:
        """Close the reply (a text block first if it has none and called no tool)."""
        changes: list[Change] = []
        if not self._calls and (self._held or not any(block.kind == "text" for block in self.blocks)):
            changes += self._grow("text", self._held)
            self._held = ""
        return changes + self._close()

    def _text(self, text: str) -> list[Change]:
        if (self.open is None or self.open.kind != "text") and not text.strip():
            self._held += text
            return []
        text, self._held = self._held + text, ""
        return self._grow("text", text)

    def _grow(self, kind: str, text: str) -> list[Change]:
        changes: list[Change] = []
        if self.open is None or self.open.kind != kind:
            changes += self._open(Block(kind))
        if text:
            self.open.text += text
            changes.append(Grew(self.open, text))
        return changes

    def _call(self, call: dict) -> list[Change]:
        function = call.get("function") or {}
        if "id" in call:  # a new call: its name, then fragments of its arguments
            self._held = ""
            block = Block("tool_call", call_id=call["id"], name=function.get("name", ""))
            self._calls[call["index"]] = block
            return self._open(block)
        block, piece = self._calls[call["index"]], function.get("arguments") or ""
        block.text += piece
        return [Grew(block, piece)] if piece else []

    def _open(self, block: Block) -> list[Change]:
        changes = self._close()
        self.blocks.append(block)
        self.open = block
        return changes + [Opened(block)]

    def _close(self) -> list[Change]:
        block, self.open = self.open, None
        return [Closed(block)] if block is not None else []


def whole_blocks(message: dict) -> list[Block]:
    """The blocks of a whole reply (OpenAI's assistant message): reasoning, the text (left out when the
    reply is only tool calls), then each call."""
    blocks = [Block("reasoning", message["reasoning_content"])] if message.get("reasoning_content") else []
    calls = message.get("tool_calls") or []
    if message.get("content") or not calls:
        blocks.append(Block("text", message.get("content") or ""))
    for call in calls:
        blocks.append(Block("tool_call", call["function"]["arguments"], call["id"], call["function"]["name"]))
    return blocks
