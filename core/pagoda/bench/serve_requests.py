"""One streamed request to an OpenAI-compatible server, timed chunk by chunk (for `pagoda bench serve`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import aiohttp

ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass
class RequestInput:
    """A prompt to send; ``prompt_len`` is its token count when known (None: unknown)."""

    prompt: str
    output_len: int
    prompt_len: int | None = None


@dataclass
class RequestResult:
    """What one streamed request measured. Times are seconds; ``itl`` holds the gaps between
    successive content chunks (a chunk may carry several tokens)."""

    success: bool = False
    error: str = ""
    prompt_len: int = 0
    output_tokens: int = 0
    usage_reported: bool = False  # token counts came from the server's usage, not chunk counts
    generated_text: str = ""
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0


@dataclass
class RequestSettings:
    """What every request of a run shares."""

    base_url: str
    model: str
    endpoint: str = "completions"  # a key of ENDPOINTS
    temperature: float = 0.0
    ignore_eos: bool = False
    extra_body: dict[str, Any] = field(default_factory=dict)


def build_payload(settings: RequestSettings, item: RequestInput) -> dict[str, Any]:
    """The JSON body of a streamed completions or chat request (usage asked for in the last chunk)."""
    body: dict[str, Any] = {
        "model": settings.model,
        "max_tokens": item.output_len,
        "temperature": settings.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if settings.endpoint == "chat":
        body["messages"] = [{"role": "user", "content": item.prompt}]
    else:
        body["prompt"] = item.prompt
    if settings.ignore_eos:
        body["ignore_eos"] = True  # vLLM's extension, also accepted by Pagoda's server
    body.update(settings.extra_body)
    return body


def chunk_text(chunk: dict[str, Any]) -> str:
    """The generated text in one streamed chunk ('' for role-only, usage-only or empty chunks)."""
    choices = chunk.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "delta" in choice:
        return (choice["delta"] or {}).get("content") or ""
    return choice.get("text") or ""


async def send_request(session: aiohttp.ClientSession, settings: RequestSettings, item: RequestInput) -> RequestResult:
    """Stream one request and time it; failures are returned (``success=False``), never raised."""
    result = RequestResult(prompt_len=item.prompt_len or 0)
    url = settings.base_url.rstrip("/") + ENDPOINTS[settings.endpoint]
    result.start_time = start = time.perf_counter()
    try:
        async with session.post(url, json=build_payload(settings, item)) as response:
            if response.status != 200:
                body = (await response.read()).decode(errors="replace")
                result.error = f"HTTP {response.status}: {body[:500]}"
                return result
            await _read_stream(response.content, result, start)
    except (aiohttp.ClientError, ValueError, OSError) as exc:  # ValueError: bad JSON, a line over 1 MiB
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.latency = time.perf_counter() - start
    result.success = result.error == "" and bool(result.generated_text or result.output_tokens)
    if not result.success and not result.error:
        result.error = "the stream ended without any generated text"
    return result


async def sse_lines(body: aiohttp.StreamReader) -> AsyncIterator[str]:
    """The lines of an event stream, split at line feeds only (as the SSE format says: text may
    hold U+2028 and the like, where str.splitlines would split too)."""
    async for line in body:  # aiohttp's reader splits at b"\n" only
        yield line.rstrip(b"\r\n").decode("utf-8")


async def _read_stream(body: aiohttp.StreamReader, result: RequestResult, start: float) -> None:
    """Parse server-sent events: time each content chunk, take token counts from usage."""
    parts: list[str] = []
    last = start
    chunks = 0
    async for line in sse_lines(body):
        if not line.startswith("data:"):
            continue
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            result.error = str(chunk["error"])
            break
        _read_usage(chunk, result)
        text = chunk_text(chunk)
        if not text:
            continue
        now = time.perf_counter()
        if chunks == 0:
            result.ttft = now - start
        else:
            result.itl.append(now - last)
        last, chunks = now, chunks + 1
        parts.append(text)
    result.generated_text = "".join(parts)
    if not result.usage_reported:
        result.output_tokens = chunks


def _read_usage(chunk: dict[str, Any], result: RequestResult) -> None:
    usage = chunk.get("usage")
    if not usage:
        return
    result.usage_reported = True
    result.output_tokens = int(usage.get("completion_tokens") or 0)
    if usage.get("prompt_tokens"):
        result.prompt_len = int(usage["prompt_tokens"])
