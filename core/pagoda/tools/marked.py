"""Formats whose tool calls follow a marker (``<tool_call>``, ``[TOOL_CALLS]``): the shared text part.

Text before the first marker is content. A marker split over two pieces of streamed text
(``"... <tool_"`` then ``"call>"``) is held back until it is known whether it completes.
Subclasses read what follows a marker (:meth:`MarkedCallsParser._read_calls`).
"""

from __future__ import annotations

from typing import ClassVar

from pagoda.interfaces.tool_parser import TextPiece, ToolEvent, ToolParser


def held_back(text: str, marker: str) -> int:
    """Length of the longest end of ``text`` that could be the beginning of ``marker``."""
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:size]):
            return size
    return 0


class MarkedCallsParser(ToolParser):
    """Content until ``marker``; then the calls, read by the subclass."""

    marker: ClassVar[str]

    def __init__(self, tokenizer=None) -> None:
        super().__init__(tokenizer)
        self.pending = ""  # text received and not read yet
        self.in_calls = False
        self.num_calls = 0

    def feed(self, text: str) -> list[ToolEvent]:
        self.pending += text
        events: list[ToolEvent] = []
        while self._read_calls(events) if self.in_calls else self._read_text(events):
            pass
        return events

    def finish(self) -> list[ToolEvent]:
        events: list[ToolEvent] = []
        rest = self._finish_calls() if self.in_calls else self.pending
        self.pending = ""
        if rest:
            events.append(TextPiece(rest))
        return events

    def _read_text(self, events: list[ToolEvent]) -> bool:
        """Emit content up to the marker; True once past it (the calls come next)."""
        found = self.pending.find(self.marker)
        end = found if found >= 0 else len(self.pending) - held_back(self.pending, self.marker)
        if end:
            events.append(TextPiece(self.pending[:end]))
        if found < 0:
            self.pending = self.pending[end:]
            return False
        self.pending = self.pending[found + len(self.marker) :]
        self.in_calls = True
        self.start_calls()
        return True

    def skip_to_marker(self) -> bool:
        """Drop text up to and including the next marker (True), or all but a possible marker start."""
        found = self.pending.find(self.marker)
        if found < 0:
            keep = held_back(self.pending, self.marker)
            self.pending = self.pending[len(self.pending) - keep :]
            return False
        self.pending = self.pending[found + len(self.marker) :]
        return True

    def back_to_text(self, events: list[ToolEvent], raw: str) -> None:
        """What followed a marker was no call (``raw``: what was read of it): it is content after all."""
        events.append(TextPiece(self.marker + raw))
        self.in_calls = False

    def start_calls(self) -> None:
        """Called right after a marker."""

    def _read_calls(self, events: list[ToolEvent]) -> bool:
        raise NotImplementedError

    def _finish_calls(self) -> str:
        """The output ended inside the calls: return text to give back as content (default none)."""
        return ""
