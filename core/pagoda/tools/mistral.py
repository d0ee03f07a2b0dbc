"""``mistral``: Mistral models write ``[TOOL_CALLS]`` and then the calls, either as a JSON array
``[{"name": "f", "arguments": {...}}, ...]`` (tokenizer v3) or as ``name[ARGS]{...}`` after each
``[TOOL_CALLS]`` (tokenizer v11 and later; a ``[CALL_ID]id`` after the name is ignored).
``[TOOL_CALLS]`` is a special token, so these requests keep special tokens in the text."""

from __future__ import annotations

import re
from typing import Optional, Union

from pagoda.interfaces.tool_parser import CallStarted, ToolEvent
from pagoda.tools.json_stream import ArgumentsReader, CallListReader, CallReader, feed_reader
from pagoda.tools.marked import MarkedCallsParser

ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_NAME = re.compile(r"[\w.\-]*")


class MistralToolParser(MarkedCallsParser):
    """Content before ``[TOOL_CALLS]``; then the calls in either of Mistral's formats."""

    description = 'Mistral: [TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}'
    marker = "[TOOL_CALLS]"
    skip_special_tokens = False

    def __init__(self, tokenizer=None) -> None:
        super().__init__(tokenizer)
        self._stage = "start"  # start, json, name, args, between
        self._reader: Optional[Union[CallListReader, CallReader, ArgumentsReader]] = None

    def start_calls(self) -> None:
        self._stage = "start"

    def new_call_id(self) -> str:
        """Mistral's chat templates accept only 9 letters and digits as a tool call id."""
        return super().new_call_id()[-9:]

    def _read_calls(self, events: list[ToolEvent]) -> bool:
        return getattr(self, f"_read_{self._stage}")(events)

    def _read_start(self, events: list[ToolEvent]) -> bool:
        head = self.pending.lstrip()
        if not head:
            return False
        first = head[0]
        if first in "[{":
            self.pending = head
            self._reader = CallListReader(self.num_calls) if first == "[" else CallReader(self.num_calls)
            self._stage = "json"
        else:
            self._stage = "name"
        return True

    def _read_json(self, events: list[ToolEvent]) -> bool:
        done, self.pending = feed_reader(self._reader, self.pending, events)
        if not done:
            return False
        reader, self._reader = self._reader, None
        self.num_calls += reader.num_started
        self._stage = "between"
        if not reader.num_started:
            self.back_to_text(events, reader.text)
        return True

    def _read_name(self, events: list[ToolEvent]) -> bool:
        end = self.pending.find(ARGS)
        name, plausible = _name_so_far((self.pending if end < 0 else self.pending[:end]).lstrip())
        if not plausible or (end >= 0 and not name):
            self.back_to_text(events, "")  # "[TOOL_CALLS]" followed by prose: content
            return True
        if end < 0:
            return False
        self.pending = self.pending[end + len(ARGS) :]
        events.append(CallStarted(self.num_calls, name))
        self._reader = ArgumentsReader(self.num_calls)
        self._stage = "args"
        return True

    def _read_args(self, events: list[ToolEvent]) -> bool:
        done, self.pending = feed_reader(self._reader, self.pending, events)
        if not done:
            return False
        self._reader = None
        self.num_calls += 1
        self._stage = "between"
        return True

    def _read_between(self, events: list[ToolEvent]) -> bool:
        if not self.skip_to_marker():
            return False
        self._stage = "start"
        return True

    def _finish_calls(self) -> str:
        if self._stage in ("start", "name"):
            return self.marker + self.pending
        if self._stage == "json" and not self._reader.num_started:
            return self.marker + self._reader.text + self.pending
        return ""


def _name_so_far(head: str) -> tuple[str, bool]:
    """The call name at the start of ``head`` (the text after ``[TOOL_CALLS]``, up to ``[ARGS]`` if
    it came), and whether ``head`` can still be a call (a name, maybe a marker's beginning)."""
    name, separator, _ = head.partition(CALL_ID)
    if separator:
        return name, bool(_NAME.fullmatch(name))
    bracket = name.find("[")
    tail = "" if bracket < 0 else name[bracket:]
    name = name if bracket < 0 else name[:bracket]
    partial_marker = not tail or ARGS.startswith(tail) or CALL_ID.startswith(tail)
    return name, bool(_NAME.fullmatch(name)) and partial_marker
