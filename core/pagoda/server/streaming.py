"""Drive engine streams for one HTTP request: merge several prompts, watch for client disconnects, SSE."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator, Awaitable, TypeVar

import msgspec
from fastapi import Request

from pagoda.outputs import Logprob, RequestOutput
from pagoda.server.errors import APIError

T = TypeVar("T")
_DONE = object()


async def merge(streams: list[AsyncIterator[RequestOutput]]) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Yield ``(prompt_index, output)`` from several streams as they arrive.

    Closing the merged iterator early cancels every producer, which aborts unfinished requests.
    """
    if len(streams) == 1:
        try:
            async for out in streams[0]:
                yield 0, out
        finally:
            await streams[0].aclose()  # aborts the request now if it did not finish
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(index: int, stream: AsyncIterator[RequestOutput]) -> None:
        try:
            async for out in stream:
                await queue.put((index, out))
        except BaseException as exc:  # noqa: BLE001 - forwarded to the consumer
            await queue.put(exc)
            return
        await queue.put(_DONE)

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is _DONE:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work``; cancel it (aborting its engine requests) if the client goes away first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        raise APIError(400, "the client disconnected", code="client_disconnected")
    finally:
        for pending in (task, watcher):
            if not pending.done():
                pending.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)


async def _disconnected(request: Request) -> None:
    """Return when the ASGI server reports ``http.disconnect`` (the body is already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


# Characters that Python's str.splitlines (and clients built on it) takes for line breaks, though
# JSON leaves them raw (here in UTF-8): escaped, so no client splits an event in two.
_LINE_BREAKS = ((b"\xc2\x85", b"\\u0085"), (b"\xe2\x80\xa8", b"\\u2028"), (b"\xe2\x80\xa9", b"\\u2029"))
_encode = msgspec.json.Encoder().encode


def sse(payload: dict) -> bytes:
    """One server-sent event holding ``payload`` as JSON (msgspec: a fraction of json.dumps' cost
    per streamed token)."""
    data = _encode(payload)
    for raw, escaped in _LINE_BREAKS:
        if raw in data:
            data = data.replace(raw, escaped)
    return b"data: " + data + b"\n\n"


def sse_event(kind: str, payload: dict) -> bytes:
    """A server-sent event with an ``event:`` line naming its type (the Responses and Messages APIs' streams)."""
    return b"event: " + kind.encode() + b"\n" + sse(payload)


SSE_DONE = b"data: [DONE]\n\n"


def sampled_entries(logprobs: list[dict[int, Logprob]], token_ids: list[int]) -> list[tuple[Logprob, list[Logprob]]]:
    """Per generated token: its own Logprob and the ranked top entries (rank 1 first)."""
    result = []
    for entry, token in zip(logprobs, token_ids):
        top = sorted((lp for lp in entry.values() if lp.rank is not None), key=lambda lp: lp.rank)
        result.append((entry[token], top))
    return result


def completion_logprobs(logprobs: list[dict[int, Logprob]] | None, token_ids: list[int], text_offset: int) -> dict | None:
    """The legacy completions ``logprobs`` object: tokens, token_logprobs, top_logprobs, text_offset."""
    if logprobs is None:
        return None
    tokens, token_lps, tops, offsets = [], [], [], []
    for own, top in sampled_entries(logprobs, token_ids):
        piece = own.decoded_token or ""
        tokens.append(piece)
        token_lps.append(own.logprob)
        tops.append({lp.decoded_token or "": lp.logprob for lp in top})
        offsets.append(text_offset)
        text_offset += len(piece)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(logprobs: list[dict[int, Logprob]] | None, token_ids: list[int]) -> dict | None:
    """The chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    if logprobs is None:
        return None

    def item(lp: Logprob) -> dict:
        token = lp.decoded_token or ""
        return {"token": token, "logprob": lp.logprob, "bytes": list(token.encode("utf-8"))}

    return {"content": [{**item(own), "top_logprobs": [item(lp) for lp in top]}
                        for own, top in sampled_entries(logprobs, token_ids)]}
