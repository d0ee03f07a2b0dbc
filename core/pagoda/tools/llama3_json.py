"""``llama3_json``: Llama 3.1-3.3 answer a tool call with nothing but JSON,
``{"name": "f", "parameters": {...}}`` (optionally after ``<|python_tag|>``; several calls are
separated by ``;``). An output that does not start with ``{`` is plain content."""

from __future__ import annotations

from typing import Optional

from pagoda.interfaces.tool_parser import TextPiece, ToolEvent, ToolParser
from pagoda.tools.json_stream import CallReader, feed_reader

PYTHON_TAG = "<|python_tag|>"


class Llama3JsonToolParser(ToolParser):
    """JSON calls at the very start of the output; anything after them is dropped."""

    description = 'Llama 3 JSON: {"name": ..., "parameters": {...}} (";"-separated)'

    def __init__(self, tokenizer=None) -> None:
        super().__init__(tokenizer)
        self.pending = ""
        self.num_calls = 0
        self._stage = "start"  # start, text, call, between, ignore
        self._reader: Optional[CallReader] = None

    def feed(self, text: str) -> list[ToolEvent]:
        self.pending += text
        events: list[ToolEvent] = []
        while getattr(self, f"_read_{self._stage}")(events):
            pass
        return events

    def finish(self) -> list[ToolEvent]:
        rest = self.pending if self._stage in ("start", "text") else ""
        if self._stage == "call" and not self._reader.started:
            rest = self._reader.text + self.pending
        self.pending = ""
        return [TextPiece(rest)] if rest else []

    def _read_start(self, events: list[ToolEvent]) -> bool:
        head = self.pending.lstrip()
        if head.startswith(PYTHON_TAG):
            self.pending = head[len(PYTHON_TAG) :]
            return True
        if not head or PYTHON_TAG.startswith(head):
            return False  # nothing yet, or maybe the tag
        if head[0] == "{":
            self.pending = head
            self._start_call()
        else:
            self._stage = "text"
        return True

    def _read_text(self, events: list[ToolEvent]) -> bool:
        if self.pending:
            events.append(TextPiece(self.pending))
            self.pending = ""
        return False

    def _start_call(self) -> None:
        self._reader = CallReader(self.num_calls)
        self._stage = "call"

    def _read_call(self, events: list[ToolEvent]) -> bool:
        done, self.pending = feed_reader(self._reader, self.pending, events)
        if not done:
            return False
        reader, self._reader = self._reader, None
        if reader.started:
            self.num_calls += 1
            self._stage = "between"
        else:  # JSON, but not a call: the answer itself
            self.pending = reader.text + self.pending
            self._stage = "text"
        return True

    def _read_between(self, events: list[ToolEvent]) -> bool:
        head = self.pending.lstrip()
        if head.startswith(";"):
            self.pending = head[1:]
            return True
        if not head:
            self.pending = head
            return False
        if head[0] == "{":
            self.pending = head
            self._start_call()
        else:
            self._stage = "ignore"
        return True

    def _read_ignore(self, events: list[ToolEvent]) -> bool:
        self.pending = ""
        return False
