"""Record a run for the dashboard chart: offer a running server a load that rises in steps (Poisson arrivals;
streamed and whole requests, some dropped mid-stream) while scraping its /metrics every few seconds, and write
each scrape, with its time, as one JSON line of a gzip file.

    pagoda serve MODEL --served-model-name tiny --port 8000 &
    python examples/observability/record_run.py --url http://127.0.0.1:8000 --model tiny --out run.jsonl.gz

Prompts are words ``t0``, ``t1``, ... (the tiny test models' vocabulary; any tokenizer takes them).
plot_dashboard.py draws the dashboard's main panels from the file.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import time

import httpx


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--out", required=True, help="the scrapes, one JSON line each ({t, text}), gzip")
    p.add_argument("--rates", default="2,6,12", help="requests per second of each stage (comma-separated)")
    p.add_argument("--stage-seconds", type=float, default=40.0)
    p.add_argument("--scrape-seconds", type=float, default=2.0)
    p.add_argument("--tail-seconds", type=float, default=10.0, help="scrapes after the load (back to idle)")
    p.add_argument("--max-prompt-words", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--drop-fraction", type=float, default=0.1, help="streams closed after their first chunk")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


async def one_request(client: httpx.AsyncClient, args: argparse.Namespace, rng: random.Random) -> None:
    words = " ".join(f"t{rng.randrange(384)}" for _ in range(rng.randint(4, args.max_prompt_words)))
    stream = rng.random() < 0.5
    drop = stream and rng.random() < args.drop_fraction / 0.5
    body = {"model": args.model, "prompt": words, "max_tokens": rng.randint(8, args.max_tokens), "stream": stream,
            "temperature": 1.0, "seed": rng.randrange(1 << 30)}
    try:
        if not stream:
            await client.post("/v1/completions", json=body)
            return
        async with client.stream("POST", "/v1/completions", json=body) as response:
            async for line in response.aiter_lines():
                if drop and line.startswith("data: {"):
                    return  # closing the stream aborts the request in the engine
    except httpx.HTTPError as exc:
        print(f"request failed: {exc!r}")


async def offer_load(args: argparse.Namespace, stop: asyncio.Event) -> None:
    rng = random.Random(args.seed)
    tasks: set[asyncio.Task] = set()
    async with httpx.AsyncClient(base_url=args.url, timeout=300, limits=httpx.Limits(max_connections=512)) as client:
        for rate in (float(r) for r in args.rates.split(",")):
            end = time.monotonic() + args.stage_seconds
            while time.monotonic() < end:
                task = asyncio.create_task(one_request(client, args, rng))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                await asyncio.sleep(rng.expovariate(rate))
        await asyncio.gather(*tasks)
    await asyncio.sleep(args.tail_seconds)
    stop.set()


async def scrape_until(args: argparse.Namespace, stop: asyncio.Event, out) -> None:
    async with httpx.AsyncClient(base_url=args.url, timeout=30) as client:
        while True:
            text = (await client.get("/metrics")).text
            out.write(json.dumps({"t": time.time(), "text": text}) + "\n")
            if stop.is_set():
                return
            try:
                await asyncio.wait_for(stop.wait(), args.scrape_seconds)
            except asyncio.TimeoutError:
                pass


async def main() -> None:
    args = parse_args()
    stop = asyncio.Event()
    with gzip.open(args.out, "wt") as out:
        await asyncio.gather(offer_load(args, stop), scrape_until(args, stop, out))


if __name__ == "__main__":
    asyncio.run(main())
