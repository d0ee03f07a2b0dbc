"""Run a batch file through the server's own routes, in process, at engine speed.

Every line goes to the same FastAPI app ``pagoda serve`` answers with (over an in-process ASGI
transport, no socket), so a line gets exactly what an HTTP client would: the same validation, tool
and reasoning parsing, structured output and error bodies. Up to ``window`` lines are in flight at
once (the engine batches them); results are written in input order, each write whole lines appended
to the results file, so a run killed at any point leaves a valid prefix that a re-run continues.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Union

import httpx
from tqdm.auto import tqdm

from pagoda.server.batch.records import BatchRequest, LineError, encode, error_record, result_record
from pagoda.server.errors import error_body


@dataclass
class BatchSummary:
    lines: int = 0  # lines run this time
    skipped: int = 0  # lines the results file already answered
    statuses: Counter = field(default_factory=Counter)  # HTTP status -> lines; "refused": never reached the API

    def describe(self) -> str:
        ok = sum(n for status, n in self.statuses.items() if isinstance(status, int) and status < 400)
        failed = {str(status): n for status, n in sorted(self.statuses.items(), key=str) if status == "refused"
                  or status >= 400}
        errors = ", ".join(f"{n} x {status}" for status, n in failed.items()) or "none"
        return f"{self.lines} lines run ({ok} succeeded; errors: {errors}), {self.skipped} already in the results"


class OrderedWriter:
    """Writes records in sequence order as they complete (whole lines, appended); ``written(n)`` is
    called with how many were written each time."""

    def __init__(self, path: str, written: Callable[[int], None]) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.written = written
        self.next = 0
        self.ready: dict[int, bytes] = {}

    def put(self, sequence: int, record: bytes) -> None:
        self.ready[sequence] = record
        chunk = []
        while self.next in self.ready:
            chunk.append(self.ready.pop(self.next))
            self.next += 1
        if chunk:
            data = b"".join(chunk)
            while data:  # os.write may write part of it
                data = data[os.write(self.fd, data):]
            self.written(len(chunk))

    def close(self) -> None:
        os.fsync(self.fd)
        os.close(self.fd)


async def run_batch(app, work: list[Union[BatchRequest, LineError]], output_path: str, window: int,
                    progress: bool | None = None) -> BatchSummary:
    """Send each request of ``work`` to ``app`` and append its record to ``output_path`` in order."""
    summary = BatchSummary(lines=len(work))
    seats = asyncio.Semaphore(window)
    bar = tqdm(total=len(work), desc="Batch", unit="line", dynamic_ncols=True,
               disable={None: None, True: False, False: True}[progress])  # None: shown on a terminal

    def written(count: int) -> None:
        for _ in range(count):
            seats.release()
        bar.update(count)

    writer = OrderedWriter(output_path, written)
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://batch", timeout=None) as client:
            tasks = []
            for sequence, item in enumerate(work):
                await seats.acquire()  # freed when its record is written: bounds what waits in memory
                tasks.append(asyncio.create_task(_one(client, item, sequence, writer, summary)))
            await asyncio.gather(*tasks)
    finally:
        writer.close()
        bar.close()
    return summary


async def _one(client: httpx.AsyncClient, item: Union[BatchRequest, LineError], sequence: int, writer: OrderedWriter,
               summary: BatchSummary) -> None:
    if isinstance(item, LineError):
        summary.statuses["refused"] += 1
        writer.put(sequence, encode(error_record(item)))
        return
    try:
        response = await client.post(item.url, json=item.body)
        status, body = response.status_code, _body(response)
    except Exception as exc:  # noqa: BLE001 - recorded for this line; the others go on
        status, body = 500, error_body(500, f"internal error: {type(exc).__name__}: {exc}")
    summary.statuses[status] += 1
    writer.put(sequence, encode(result_record(item.custom_id, status, body)))


def _body(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return response.text
