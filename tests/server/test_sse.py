"""Server-sent events survive text that holds characters str.splitlines takes for line breaks."""

from __future__ import annotations

import asyncio
import json

from unittest import mock

import aiohttp

from pagoda.bench.serve_requests import sse_lines
from pagoda.server.streaming import sse

AWKWARD = "a\u2028b\x85c\u2029d\x0c\x1ce\r\nf"


def test_sse_event_is_one_line_and_round_trips():
    event = sse({"text": AWKWARD}).decode()
    assert event.endswith("\n\n") and len(event[:-2].splitlines()) == 1
    assert json.loads(event[len("data: "):])["text"] == AWKWARD


def test_bench_client_splits_events_at_line_feeds_only():
    raw = 'data: {"text": "x\u2028y"}\n\n'.encode() + sse({"text": AWKWARD}) + b"data: [DONE]\n\n"
    pieces = [raw[i : i + 7] for i in range(0, len(raw), 7)]  # chunks cut through characters and lines

    async def read() -> list[str]:
        body = aiohttp.StreamReader(mock.Mock(), 1 << 16, loop=asyncio.get_running_loop())
        for piece in pieces:
            body.feed_data(piece)
        body.feed_eof()
        return [line async for line in sse_lines(body) if line]

    lines = asyncio.run(read())
    assert [json.loads(line[6:])["text"] for line in lines[:2]] == ["x\u2028y", AWKWARD]
    assert lines[2] == "data: [DONE]"
