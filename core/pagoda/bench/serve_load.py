"""The load generator of `pagoda bench serve`: request arrivals (Poisson or gamma) under a concurrency cap."""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Coroutine, TypeVar

import aiohttp

from pagoda.bench.serve_requests import RequestInput, RequestResult, RequestSettings, send_request

T = TypeVar("T")


@dataclass
class LoadShape:
    """When requests start: ``request_rate`` per second (inf = all at once) with gamma-distributed
    gaps of shape ``burstiness`` (1 = Poisson arrivals; < 1 burstier; > 1 more even), and at most
    ``max_concurrency`` in flight (None = no cap)."""

    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0

    def validate(self) -> None:
        if not self.request_rate > 0:
            raise ValueError(f"--request-rate must be > 0 (or inf), got {self.request_rate}")
        if not self.burstiness > 0:
            raise ValueError(f"--burstiness must be > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"--max-concurrency must be >= 1, got {self.max_concurrency}")


def arrival_gaps(shape: LoadShape, count: int) -> list[float]:
    """Seconds to wait after each request before the next (mean 1 / request_rate)."""
    if math.isinf(shape.request_rate):
        return [0.0] * count
    rng = random.Random(shape.seed)
    scale = 1.0 / (shape.request_rate * shape.burstiness)
    return [rng.gammavariate(shape.burstiness, scale) for _ in range(count)]


async def arrivals(inputs: list[RequestInput], shape: LoadShape) -> AsyncIterator[RequestInput]:
    for item, gap in zip(inputs, arrival_gaps(shape, len(inputs))):
        yield item
        if gap > 0:
            await asyncio.sleep(gap)


def run_event_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop where installed (the client then costs a few times less per event), else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


async def run_load(
    settings: RequestSettings,
    inputs: list[RequestInput],
    shape: LoadShape,
    on_done: Callable[[RequestResult], None] | None = None,
) -> tuple[list[RequestResult], float]:
    """Send every input on its arrival schedule; returns the results (input order) and the wall time."""
    limit = asyncio.Semaphore(shape.max_concurrency) if shape.max_concurrency else None
    connector = aiohttp.TCPConnector(limit=0)  # no cap: the load shape decides what is in flight
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60.0)

    async with aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=1 << 20) as client:

        async def one(item: RequestInput) -> RequestResult:
            if limit is None:
                result = await send_request(client, settings, item)
            else:
                async with limit:
                    result = await send_request(client, settings, item)
            if on_done is not None:
                on_done(result)
            return result

        start = time.perf_counter()
        tasks = [asyncio.create_task(one(item)) async for item in arrivals(inputs, shape)]
        results = await asyncio.gather(*tasks)
        return list(results), time.perf_counter() - start
