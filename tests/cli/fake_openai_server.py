"""A minimal OpenAI-style streaming server with known timings, run in a thread, for `bench serve` tests.

Every request waits ``first_delay`` seconds, then streams ``max_tokens`` one-word chunks
``token_delay`` seconds apart, then a usage chunk and ``[DONE]``. /tokenize counts words.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


@dataclass
class FakeTimings:
    first_delay: float = 0.2
    token_delay: float = 0.05
    tokenize: bool = True
    bodies: list[dict] = field(default_factory=list)  # every generation request body received
    in_flight: int = 0
    max_in_flight: int = 0


def build_app(t: FakeTimings) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    @app.post("/tokenize")
    async def tokenize(request: Request):
        if not t.tokenize:
            return JSONResponse({"error": "not found"}, status_code=404)
        words = (await request.json())["prompt"].split()
        return {"tokens": list(range(len(words))), "count": len(words), "words": words}

    @app.post("/detokenize")
    async def detokenize(request: Request):
        return {"prompt": " ".join(f"w{i}" for i in (await request.json())["tokens"])}

    async def generate(request: Request, chat: bool):
        body = await request.json()
        t.bodies.append(body)
        if body["model"] != "fake-model":
            return JSONResponse({"error": {"message": "no such model", "code": 404}}, status_code=404)
        prompt = body["messages"][0]["content"] if chat else body["prompt"]
        return StreamingResponse(_events(t, body["max_tokens"], len(prompt.split()), chat), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await generate(request, chat=True)

    return app


async def _events(t: FakeTimings, max_tokens: int, prompt_tokens: int, chat: bool):
    t.in_flight += 1
    t.max_in_flight = max(t.max_in_flight, t.in_flight)
    try:
        if chat:
            yield _sse({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
        await asyncio.sleep(t.first_delay)
        for i in range(max_tokens):
            if i:
                await asyncio.sleep(t.token_delay)
            piece = f" tok{i}"
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            yield _sse({"choices": [choice]})
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                 "total_tokens": prompt_tokens + max_tokens}
        yield _sse({"choices": [], "usage": usage})
        yield "data: [DONE]\n\n"
    finally:
        t.in_flight -= 1


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeServer:
    """Run the app with uvicorn in a daemon thread; ``url`` is its root."""

    def __init__(self, timings: FakeTimings) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(build_app(timings), host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "FakeServer":
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("the fake server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
