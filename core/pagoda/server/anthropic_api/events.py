"""Anthropic's stream: the reply's blocks (``pagoda.server.reply_blocks``) as its events.

``message_start`` (the message with no content), ``ping``, per block ``content_block_start``,
``content_block_delta`` (``text_delta``, ``thinking_delta``, ``input_json_delta``) and
``content_block_stop``; then ``message_delta`` (``stop_reason``, ``stop_sequence``, the output tokens) and
``message_stop``. A failure after the start is an ``error`` event. Each is an SSE ``event:`` line with its
type and its JSON.
"""

from __future__ import annotations

from pagoda.server.anthropic_api.output import content_block
from pagoda.server.errors import anthropic_error_body
from pagoda.server.reply_blocks import Change, Closed, Grew, Opened, ReplyBlocks
from pagoda.server.streaming import sse_event

_DELTAS = {"text": ("text_delta", "text"), "reasoning": ("thinking_delta", "thinking"),
           "tool_call": ("input_json_delta", "partial_json")}


def event(kind: str, **fields) -> bytes:
    return sse_event(kind, {"type": kind, **fields})


class MessageEvents:
    """Builds one message's events."""

    def __init__(self) -> None:
        self.blocks = ReplyBlocks()

    @staticmethod
    def start(message: dict) -> list[bytes]:
        return [event("message_start", message=message), event("ping")]

    def feed(self, delta: dict) -> list[bytes]:
        return self._events(self.blocks.feed(delta))

    def finish(self) -> list[bytes]:
        return self._events(self.blocks.finish())

    @staticmethod
    def done(reason: str, sequence: str | None, spent: dict) -> list[bytes]:
        """``message_delta`` with the final usage (the cache reads known by now), then ``message_stop``."""
        return [event("message_delta", delta={"stop_reason": reason, "stop_sequence": sequence}, usage=spent),
                event("message_stop")]

    @staticmethod
    def fail(status: int, message: str) -> bytes:
        return event("error", error=anthropic_error_body(status, message)["error"])

    def _events(self, changes: list[Change]) -> list[bytes]:
        out = []
        for change in changes:
            index = self.blocks.index(change.block)
            if isinstance(change, Opened):
                out.append(event("content_block_start", index=index, content_block=content_block(change.block, False)))
            elif isinstance(change, Grew):
                kind, key = _DELTAS[change.block.kind]
                out.append(event("content_block_delta", index=index, delta={"type": kind, key: change.piece}))
            elif isinstance(change, Closed):
                out.append(event("content_block_stop", index=index))
        return out
