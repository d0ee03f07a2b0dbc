"""The Responses API's stream: the reply's blocks (``pagoda.server.reply_blocks``) as OpenAI's typed events.

``response.created`` and ``response.in_progress``; per output item ``response.output_item.added``, its
content (``response.content_part.added``, ``response.output_text.delta`` / ``response.reasoning_text.delta``
/ ``response.function_call_arguments.delta``, their ``.done``), ``response.output_item.done``; at the end
``response.completed`` (``response.incomplete`` when ``max_output_tokens`` ran out). Each event is an
SSE ``event:`` line with its type and its JSON, numbered by ``sequence_number``.
"""

from __future__ import annotations

from typing import Callable, Optional

from pagoda.server.reply_blocks import Block, Change, Closed, Grew, Opened, ReplyBlocks
from pagoda.server.responses_api.output import block_item, item_status
from pagoda.server.streaming import sse_event

_TEXT_EVENTS = {"message": "response.output_text", "reasoning": "response.reasoning_text"}


class ResponseEvents:
    """Builds one response's events; ``snapshot(status=..., output=...)`` makes the ``response`` object."""

    def __init__(self, snapshot: Callable[..., dict]) -> None:
        self.snapshot = snapshot
        self.sequence = 0
        self.blocks = ReplyBlocks()
        self.items: dict[int, dict] = {}  # id(block) -> its output item
        self.output: list[dict] = []  # the items so far, in order
        self._status = "completed"  # of the text item being closed

    def event(self, kind: str, **fields) -> bytes:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse_event(kind, payload)

    def start(self) -> list[bytes]:
        response = self.snapshot(status="in_progress", output=[])
        return [self.event("response.created", response=response),
                self.event("response.in_progress", response=response)]

    def feed(self, delta: dict) -> list[bytes]:
        """The events of one chat message delta."""
        return self._events(self.blocks.feed(delta))

    def finish(self, finish_reason: Optional[str]) -> list[bytes]:
        """Close the output: the events up to (not including) the final ``response.*`` one."""
        self._status = item_status(finish_reason)
        return self._events(self.blocks.finish())

    def done(self, status: str, usage: dict, incomplete: Optional[dict] = None) -> bytes:
        kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(status, "response.failed")
        return self.event(kind, response=self.snapshot(status=status, output=self.output, usage=usage,
                                                       incomplete=incomplete))

    def fail(self, message: str, code: Optional[str], param: Optional[str]) -> list[bytes]:
        error = {"code": code or "server_error", "message": message}
        return [self.event("error", code=code, message=message, param=param),
                self.event("response.failed", response=self.snapshot(status="failed", output=self.output,
                                                                     error=error))]

    def _events(self, changes: list[Change]) -> list[bytes]:
        events: list[bytes] = []
        for change in changes:
            if isinstance(change, Opened):
                events += self._opened(change.block)
            elif isinstance(change, Grew):
                events.append(self._grew(change.block, change.piece))
            elif isinstance(change, Closed):
                events += self._closed(change.block)
        return events

    def _opened(self, block: Block) -> list[bytes]:
        item = block_item(block, "in_progress")
        self.items[id(block)] = item
        self.output.append(item)
        index = len(self.output) - 1
        parts = item.get("content")
        added = {**_copy(item), "content": []} if parts is not None else _copy(item)
        events = [self.event("response.output_item.added", output_index=index, item=added)]
        if parts is not None:
            events.append(self.event("response.content_part.added", item_id=item["id"], output_index=index,
                                     content_index=0, part=dict(parts[0])))
        return events

    def _grew(self, block: Block, piece: str) -> bytes:
        item = self.items[id(block)]
        index = self.output.index(item)
        if block.kind == "tool_call":
            item["arguments"] = block.text
            return self.event("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                              delta=piece)
        item["content"][0]["text"] = block.text
        fields = {"logprobs": []} if item["type"] == "message" else {}
        return self.event(_TEXT_EVENTS[item["type"]] + ".delta", item_id=item["id"], output_index=index,
                          content_index=0, delta=piece, **fields)

    def _closed(self, block: Block) -> list[bytes]:
        item = self.items[id(block)]
        item["status"] = self._status if item["type"] == "message" else "completed"
        index, events = self.output.index(item), []
        if item["type"] == "function_call":
            events.append(self.event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                     name=item["name"], arguments=item["arguments"]))
        else:
            part = item["content"][0]
            fields = {"logprobs": []} if item["type"] == "message" else {}
            events.append(self.event(_TEXT_EVENTS[item["type"]] + ".done", item_id=item["id"], output_index=index,
                                     content_index=0, text=part["text"], **fields))
            events.append(self.event("response.content_part.done", item_id=item["id"], output_index=index,
                                     content_index=0, part=dict(part)))
        return events + [self.event("response.output_item.done", output_index=index, item=_copy(item))]


def _copy(item: dict) -> dict:
    """A snapshot of ``item`` (it keeps growing after an event is sent)."""
    copied = dict(item)
    if "content" in copied:
        copied["content"] = [dict(part) for part in item["content"]]
    return copied
