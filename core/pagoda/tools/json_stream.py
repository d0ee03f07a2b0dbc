"""Read JSON tool calls incrementally: each character is looked at once, however the text is split.

:class:`ObjectScan` follows one JSON object and records where each top-level value starts and
ends. The readers on top of it turn what it found into tool events:

- :class:`CallReader`: one ``{"name": ..., "arguments": {...}}`` object (``parameters`` is
  accepted for ``arguments``); the arguments stream as their raw JSON text once the name is known;
- :class:`CallListReader`: ``[call, call, ...]``;
- :class:`ArgumentsReader`: a bare arguments object of a call whose name is already known.

Every reader's ``feed(text)`` returns ``(events, used)``: ``used`` is how much of ``text`` belongs
to the value (all of it until the value ends); what follows is the caller's.
:func:`feed_reader` is the usual way to drive one from a parser's unread text.
"""

from __future__ import annotations

import json
from typing import Optional, Union

from pagoda.interfaces.tool_parser import ArgumentsPiece, CallStarted, ToolEvent

ARGUMENT_KEYS = ("arguments", "parameters")
Span = list  # [start, end or None while the value is incomplete]


class ObjectScan:
    """One JSON object, read character by character: top-level keys and their value spans.

    ``done``: the object closed; ``failed``: the text is not a JSON object (only the top level is
    checked strictly; nested values are matched bracket by bracket and checked by ``json.loads``
    later).
    """

    def __init__(self) -> None:
        self.text = ""
        self.spans: dict[str, Span] = {}
        self.done = False
        self.failed = False
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._state = "start"  # start, key, colon, value, scalar, after
        self._key_start = 0
        self._key = ""

    def feed(self, text: str) -> int:
        """Read ``text``; return how many of its characters belong to the object."""
        offset = len(self.text)
        self.text += text
        for i, ch in enumerate(text):
            self._step(ch, offset + i)
            if self.done or self.failed:
                self.text = self.text[: offset + i + 1]
                return i + 1
        return len(text)

    def string_value(self, key: str) -> Optional[str]:
        """The decoded value of ``key`` once it is a complete JSON string, else None."""
        span = self.spans.get(key)
        if span is None or span[1] is None or self.text[span[0]] != '"':
            return None
        return json.loads(self.text[span[0] : span[1]])

    def raw_value(self, key: str) -> tuple[str, bool]:
        """``key``'s value text so far, and whether it is complete."""
        start, end = self.spans[key]
        return self.text[start : len(self.text) if end is None else end], end is not None

    def _step(self, ch: str, pos: int) -> None:
        if self._in_string:
            self._string_char(ch, pos)
        elif self._depth > 1:
            self._nested_char(ch, pos)
        elif ch.isspace():
            if self._state == "scalar":
                self._end_value(pos, "after")
        else:
            self._top_char(ch, pos)

    def _string_char(self, ch: str, pos: int) -> None:
        if self._escape:
            self._escape = False
        elif ch == "\\":
            self._escape = True
        elif ch == '"':
            self._in_string = False
            if self._depth == 1 and self._state == "key":
                self._key = json.loads(self.text[self._key_start : pos + 1])
                self._state = "colon"
            elif self._depth == 1:
                self._end_value(pos + 1, "after")

    def _nested_char(self, ch: str, pos: int) -> None:
        if ch == '"':
            self._in_string = True
        elif ch in "{[":
            self._depth += 1
        elif ch in "}]":
            self._depth -= 1
            if self._depth == 1:
                self._end_value(pos + 1, "after")

    def _top_char(self, ch: str, pos: int) -> None:
        state = self._state
        if state == "scalar" and ch in ",}":
            self._end_value(pos, "after")
            state = "after"
        if state == "start":
            self._expect(ch == "{", "key")
            self._depth = 1
        elif state == "key":
            if ch == "}" and not self.spans:
                self._close()
            else:
                self._expect(ch == '"', "key")
                self._in_string, self._key_start = True, pos
        elif state == "colon":
            self._expect(ch == ":", "value")
        elif state == "value":
            self._start_value(ch, pos)
        elif state == "after":
            if ch == "}":
                self._close()
            else:
                self._expect(ch == ",", "key")

    def _start_value(self, ch: str, pos: int) -> None:
        self.spans[self._key] = [pos, None]
        if ch in "{[":
            self._depth += 1
            self._state = "nested"
        elif ch == '"':
            self._in_string = True
            self._state = "string"
        elif ch in ",}]:":
            self.failed = True
        else:
            self._state = "scalar"

    def _end_value(self, end: int, state: str) -> None:
        self.spans[self._key][1] = end
        self._state = state

    def _expect(self, ok: bool, state: str) -> None:
        if ok:
            self._state = state
        else:
            self.failed = True

    def _close(self) -> None:
        self._depth = 0
        self.done = True


class ArgumentsReader:
    """A call's arguments as a bare JSON object: its raw text streams as it arrives."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.scan = ObjectScan()
        self._sent_any = False

    @property
    def done(self) -> bool:
        return self.scan.done or self.scan.failed

    def feed(self, text: str) -> tuple[list[ToolEvent], int]:
        before = len(self.scan.text)
        used = self.scan.feed(text)
        piece = self.scan.text[before:]
        if not self._sent_any:
            piece = piece.lstrip()  # whitespace before the object is not part of the arguments
        self._sent_any = self._sent_any or bool(piece)
        return ([ArgumentsPiece(self.index, piece)] if piece else []), used


class CallReader:
    """One ``{"name": ..., "arguments": {...}}`` object.

    :class:`CallStarted` comes once the name is a complete string; then the arguments' raw text
    (held until then). Arguments sent as a JSON string (``"arguments": "{\\"a\\": 1}"``) are
    decoded once complete; a call without arguments gets ``{}``.
    """

    def __init__(self, index: int) -> None:
        self.index = index
        self.scan = ObjectScan()
        self.name: Optional[str] = None
        self._sent = 0  # characters of the arguments already sent

    @property
    def done(self) -> bool:
        return self.scan.done or self.scan.failed

    @property
    def started(self) -> bool:
        return self.name is not None

    @property
    def num_started(self) -> int:
        return int(self.started)

    @property
    def text(self) -> str:
        return self.scan.text

    def feed(self, text: str) -> tuple[list[ToolEvent], int]:
        used = self.scan.feed(text)
        return self._events(), used

    def _events(self) -> list[ToolEvent]:
        events: list[ToolEvent] = []
        if self.name is None:
            self.name = self.scan.string_value("name")
            if self.name is None:
                return events
            events.append(CallStarted(self.index, self.name))
        arguments = self._arguments_so_far()
        if len(arguments) > self._sent:
            events.append(ArgumentsPiece(self.index, arguments[self._sent :]))
            self._sent = len(arguments)
        return events

    def _arguments_so_far(self) -> str:
        key = next((k for k in ARGUMENT_KEYS if k in self.scan.spans), None)
        if key is None:
            return "{}" if self.scan.done else ""
        raw, complete = self.scan.raw_value(key)
        if raw.startswith("{"):
            return raw
        if not complete:
            return ""
        if raw.startswith('"'):
            return json.loads(raw)
        return raw  # not an object: kept as written, the caller's JSON check rejects it


class CallListReader:
    """``[call, call, ...]``: a JSON array of call objects (Mistral's format; tool_choice=required)."""

    def __init__(self, first_index: int) -> None:
        self.first_index = first_index
        self.next_index = first_index
        self.text = ""
        self.closed = False
        self.failed = False
        self._state = "start"  # start, item, after
        self._call: Optional[CallReader] = None

    def feed(self, text: str) -> tuple[list[ToolEvent], int]:
        events: list[ToolEvent] = []
        pos = 0
        while pos < len(text) and not self.done:
            if self._call is not None:
                found, used = self._call.feed(text[pos:])
                events += found
                pos += used
                self._end_call()
                continue
            self._step(text[pos])
            pos += 1
        self.text += text[:pos]
        return events, pos

    @property
    def done(self) -> bool:
        return self.closed or self.failed

    @property
    def num_started(self) -> int:
        return self.next_index - self.first_index

    def _step(self, ch: str) -> None:
        if ch.isspace():
            return
        if self._state == "start":
            self._state, self.failed = "item", ch != "["
        elif self._state == "item" and ch == "{":
            self._call = CallReader(self.next_index)
            self._call.feed(ch)
        elif ch == "]" and self._state in ("item", "after"):
            self.closed = True
        elif ch == "," and self._state == "after":
            self._state = "item"
        else:
            self.failed = True

    def _end_call(self) -> None:
        call = self._call
        if call is None or not call.done:
            return
        if call.scan.failed and not call.started:
            self.failed = True
        self.next_index += int(call.started)
        self._call = None
        self._state = "after"


Reader = Union[ArgumentsReader, CallReader, CallListReader]


def feed_reader(reader: Reader, pending: str, events: list[ToolEvent]) -> tuple[bool, str]:
    """Feed a parser's unread text ``pending`` to ``reader``, adding the events it reports to
    ``events``; return whether the reader's value is complete, and the text it left unread."""
    found, used = reader.feed(pending)
    events += found
    return reader.done, pending[used:]
