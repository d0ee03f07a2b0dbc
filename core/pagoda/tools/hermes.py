"""``hermes``: Hermes 2 Pro, Qwen2.5 and Qwen3 write each call as
``<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>``."""

from __future__ import annotations

from typing import Optional

from pagoda.interfaces.tool_parser import ToolEvent
from pagoda.tools.json_stream import CallReader, feed_reader
from pagoda.tools.marked import MarkedCallsParser


class HermesToolParser(MarkedCallsParser):
    """Content before the first ``<tool_call>``; then one JSON call per ``<tool_call>`` block
    (text between and after the blocks is dropped)."""

    description = 'Hermes/Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    marker = "<tool_call>"

    def __init__(self, tokenizer=None) -> None:
        super().__init__(tokenizer)
        self._reader: Optional[CallReader] = None

    def start_calls(self) -> None:
        self._reader = CallReader(self.num_calls)

    def _read_calls(self, events: list[ToolEvent]) -> bool:
        if self._reader is None:  # between blocks: look for the next one
            if not self.skip_to_marker():
                return False
            self.start_calls()
        done, self.pending = feed_reader(self._reader, self.pending, events)
        if not done:
            return False
        reader, self._reader = self._reader, None
        if reader.started:
            self.num_calls += 1
        else:
            self.back_to_text(events, reader.text)
        return True

    def _finish_calls(self) -> str:
        reader = self._reader
        if reader is not None and not reader.started:
            return self.marker + reader.text + self.pending
        return ""
