"""A bounded soak of `pagoda serve` on the CPU: 2,000 streamed requests at a steady rate, one in ten
dropped by its client mid-stream. Every completed request returns exactly the offline greedy text,
nothing is lost, and the server's memory stays flat (RSS growth under 5% after a warm-up of 200 requests at
once and 600 at the steady rate).

Without the steady warm-up the check failed at +5.5-6.4% on a loaded machine (three busy processes beside the
test), with or without the CPU platform's allocator settings: the growth came in steps over the first 1,500
requests and then stopped, the oneDNN primitives of step sizes the load had not yet met, not a leak."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest

from pagoda import LLM, SamplingParams

pytestmark = pytest.mark.slow
NUM_REQUESTS, RATE, WARMUP, STEADY_WARMUP = 2000, 60.0, 200, 600
MAX_TOKENS = 6
KV_BLOCKS = 128  # the warm-up's 200 requests take about 400 blocks: every block is written before the check


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _kv_cache_bytes(model: str, blocks: int) -> int:
    """Bytes of ``blocks`` float32 KV blocks of 8 tokens for ``model``. The CPU cache's pages are committed as
    blocks are first written, so a cache the warm-up cycles through whole keeps the memory check about leaks."""
    c = json.loads((Path(model) / "config.json").read_text())
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return blocks * 8 * c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim * 4


def _serve(model: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "pagoda.cli.main", "serve", model, "--port", "0",
                             "--served-model-name", "tiny", "--block-size", "8",
                             "--kv-cache-memory", str(_kv_cache_bytes(model, KV_BLOCKS))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 180
    for line in proc.stdout:
        match = re.search(r"Serving tiny at (http://\S+)/v1", line)
        if match:
            return proc, match.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    proc.wait()
    pytest.fail("the server did not start")


async def _one(session: aiohttp.ClientSession, url: str, prompt: str, drop: bool) -> str | None:
    """The streamed text, or None for a request its client dropped after the first chunk."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
    parts = []
    async with session.post(url + "/v1/completions", json=body) as response:
        assert response.status == 200, await response.text()
        async for line in response.content:
            if not line.startswith(b"data: {"):
                continue
            parts.append(json.loads(line[6:])["choices"][0]["text"])
            if drop:
                return None  # leaving the block closes the connection mid-stream
    return "".join(parts)


async def _load(url: str, prompts: list[str], drops: list[bool], rate: float | None = RATE) -> list[str | None]:
    """Send the requests at ``rate`` a second (None: all at once)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        tasks = []
        for prompt, drop in zip(prompts, drops):
            tasks.append(asyncio.create_task(_one(session, url, prompt, drop)))
            if rate is not None:
                await asyncio.sleep(1 / rate)
        return await asyncio.gather(*tasks)


def test_soak_exact_outputs_no_losses_flat_memory(tiny_chat_model):
    rng = random.Random(0)
    prompts = [" ".join(f"t{rng.randrange(3, 90)}" for _ in range(rng.randrange(2, 12))) for _ in range(NUM_REQUESTS)]
    drops = [rng.random() < 0.1 for _ in prompts]
    llm = LLM(model=tiny_chat_model, block_size=8)
    expected = [o.outputs[0].text for o in llm.generate(prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS),
                                                        use_tqdm=False)]
    del llm
    proc, url = _serve(tiny_chat_model)
    try:
        pids = [proc.pid, *_children(proc.pid)]
        # Warm-up, at once and then at the steady rate: a CPU server keeps a oneDNN primitive (and its work
        # memory) for each bucket of step sizes it meets (platforms/cpu_ops.row_bucket, at most 65), and how a
        # loaded machine batches the steady load decides which it meets; these meet most of them before the check
        asyncio.run(_load(url, prompts[:WARMUP], drops[:WARMUP], rate=None))
        asyncio.run(_load(url, prompts[-STEADY_WARMUP:], drops[-STEADY_WARMUP:]))
        before = sum(_rss_kib(p) for p in pids)
        start = time.monotonic()
        got = asyncio.run(_load(url, prompts, drops))
        seconds = time.monotonic() - start
        after = sum(_rss_kib(p) for p in pids)
        completed = [(g, e) for g, e, d in zip(got, expected, drops) if not d]
        wrong = sum(g != e for g, e in completed)
        print(f"\nsoak: {NUM_REQUESTS} requests in {seconds:.1f} s ({sum(drops)} dropped mid-stream), "
              f"{len(completed)} completed, {wrong} wrong; RSS {before} -> {after} KiB ({after / before - 1:+.1%})")
        assert wrong == 0 and len(completed) == NUM_REQUESTS - sum(drops)
        assert after < before * 1.05
        assert _idle(url)  # the dropped requests were aborted: nothing runs, no KV block is held
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _idle(url: str, wait_s: float = 5.0) -> bool:
    """Whether /metrics shows no running request and an empty KV cache (gauges arrive within a second)."""
    async def gauges() -> tuple[float, float]:
        async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
            text = await response.text()
        value = lambda name: float(re.search(rf"^pagoda:{name}\S* (\S+)", text, re.M).group(1))  # noqa: E731
        return value("num_requests_running"), value("kv_cache_usage_perc")

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if asyncio.run(gauges()) == (0.0, 0.0):
            return True
        time.sleep(0.2)
    return False
