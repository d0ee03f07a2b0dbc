"""One Responses API request running through the chat pipeline: answered whole, streamed as events, or
run in the background; its response (and conversation) stored when ``store`` asks for it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Optional

from pagoda.server.chat_pipeline import ChatRun, reply_deltas, whole_reply
from pagoda.server.responses_api.events import ResponseEvents
from pagoda.server.responses_api.output import (output_items, reasoning_tokens, response_object, response_status,
                                                usage)
from pagoda.server.responses_api.protocol import ResponsesRequest
from pagoda.server.responses_api.store import ResponseStore, StoredResponse
from pagoda.server.responses_api.translate import add_item
from pagoda.server.state import engine_error
from pagoda.server.translation import Translated


@dataclass
class Exchange:
    body: ResponsesRequest
    translated: Translated
    run: ChatRun
    store: Optional[ResponseStore]  # None: not stored
    count_tokens: Callable[[str], int]
    entry: Optional[StoredResponse] = None  # once stored

    @property
    def response_id(self) -> str:
        return "resp_" + self.run.request_id.partition("-")[2]

    def snapshot(self, *, status: str, output: list[dict], usage: Optional[dict] = None,
                 incomplete: Optional[dict] = None, error: Optional[dict] = None) -> dict:
        return response_object(self.body, self.response_id, self.run.model, self.run.created, status=status,
                               output=output, usage=usage, store=self.store is not None, incomplete=incomplete,
                               error=error)

    # -- whole -------------------------------------------------------------------------------------
    async def whole(self) -> dict:
        """The finished response (stored when asked)."""
        try:
            reply = await whole_reply(self.run)
        except Exception as exc:
            raise engine_error(exc) from exc
        items = output_items(reply)
        status, incomplete = response_status(reply.finish_reason)
        spent = usage(reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens,
                      reasoning_tokens(items, self.count_tokens))
        response = self.snapshot(status=status, output=items, usage=spent, incomplete=incomplete)
        self.save(response)
        return response

    # -- background ----------------------------------------------------------------------------------
    def start_background(self) -> dict:
        """Store the response as in progress and run it in a task; ``/cancel`` stops it."""
        response = self.snapshot(status="in_progress", output=[])
        entry = self.save(response)
        entry.task = asyncio.get_running_loop().create_task(self._background(entry))
        return response

    async def _background(self, entry: StoredResponse) -> None:
        try:
            await self.whole()
        except asyncio.CancelledError:
            self._ended("cancelled")
        except Exception as exc:  # noqa: BLE001 - a failed background response reports its error
            err = engine_error(exc)
            self._ended("failed", {"code": str(err.code or "server_error"), "message": err.message})

    # -- stream --------------------------------------------------------------------------------------
    async def stream(self) -> AsyncIterator[bytes]:
        events = ResponseEvents(self.snapshot)
        self.save(self.snapshot(status="in_progress", output=[]))
        for event in events.start():
            yield event
        tokens = cached = 0
        try:
            async for delta in reply_deltas(self.run):
                tokens, cached = tokens + delta.num_tokens, max(cached, delta.cached_tokens)
                for chat_delta in delta.deltas:
                    for event in events.feed(chat_delta):
                        yield event
                if delta.finish_reason is not None:
                    for event in events.finish(delta.finish_reason):
                        yield event
                    status, incomplete = response_status(delta.finish_reason)
                    spent = usage(len(self.run.prompt_ids), tokens, cached,
                                  reasoning_tokens(events.output, self.count_tokens))
                    self.save(events.snapshot(status=status, output=events.output, usage=spent, incomplete=incomplete))
                    yield events.done(status, spent, incomplete)
        except Exception as exc:  # headers are sent: report in-band
            err = engine_error(exc)
            for event in events.fail(err.message, str(err.code) if err.code is not None else None, err.param):
                yield event
            self._ended("failed", {"code": str(err.code or "server_error"), "message": err.message})
        finally:
            self._ended("cancelled")  # the client went away before the end

    def _ended(self, status: str, error: Optional[dict] = None) -> None:
        """Mark a stored response that stopped before finishing."""
        entry = self.entry
        if entry is not None and self.store is not None and entry.running:
            entry.response = {**entry.response, "status": status, "error": error}
            entry.task = None
            self.store.finished(entry)

    # -- store ---------------------------------------------------------------------------------------
    def save(self, response: dict) -> Optional[StoredResponse]:
        """Store this response, or update it, with its conversation; None when it is not stored."""
        if self.store is None:
            return None
        conversation = [message.model_dump(exclude_none=True) for message, path
                        in zip(self.translated.chat.messages, self.translated.message_paths) if path != "instructions"]
        for item in response["output"]:
            add_item(conversation, item, "output")
        if self.entry is None:
            items = [{"role": "user", "content": self.body.input}] if isinstance(self.body.input, str) else self.body.input
            self.entry = StoredResponse(response, conversation, list(items or []))
            self.store.put(self.entry)
        else:
            self.entry.response, self.entry.conversation = response, conversation
            if not self.entry.running:
                self.store.finished(self.entry)
        return self.entry
