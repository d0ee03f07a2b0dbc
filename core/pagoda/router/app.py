"""A router for disaggregated prefill: each request's prefill on a producer, its decode on a consumer.

For ``/v1/completions`` and ``/v1/chat/completions``, the router first sends the request to a prefill server
(one started with a ``kv_producer`` KV connector) as one non-streamed token, whose response comes once the
prompt's KV blocks are saved; then it sends the request as it came to a decode server (a ``kv_consumer``),
which loads those blocks instead of computing them, and passes that response back to the client unchanged,
streamed or not. Servers of each kind are taken in turn. A prefill that fails is answered with its error;
the client never sees the prefill's own token. ``/v1/models`` and every other GET are a decode server's.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

logger = logging.getLogger("pagoda.router")
ROUTES = ("/v1/completions", "/v1/chat/completions")
FORWARDED_HEADERS = ("authorization", "x-request-id")


def prefill_body(body: dict) -> dict:
    """The request a prefill server gets: one choice of one token, not streamed (its KV blocks are the point)."""
    prefill = {k: v for k, v in body.items() if k not in ("stream", "stream_options", "min_tokens", "n", "best_of")}
    prefill["max_tokens"] = 1
    if "max_completion_tokens" in prefill:
        prefill["max_completion_tokens"] = 1
    return prefill


class Backends:
    """The prefill and decode servers, each kind taken in turn."""

    def __init__(self, prefill: Sequence[str], decode: Sequence[str]) -> None:
        if not prefill or not decode:
            raise ValueError("the router needs at least one --prefill and one --decode server URL")
        self.prefill_urls = [u.rstrip("/") for u in prefill]
        self.decode_urls = [u.rstrip("/") for u in decode]
        self._prefill = itertools.cycle(self.prefill_urls)
        self._decode = itertools.cycle(self.decode_urls)

    def next_prefill(self) -> str:
        return next(self._prefill)

    def next_decode(self) -> str:
        return next(self._decode)


def build_app(backends: Backends, timeout_s: float = 600.0) -> FastAPI:
    """The router's FastAPI app."""
    app = FastAPI(title="Pagoda router")
    client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=10.0))
    app.router.on_shutdown.append(client.aclose)

    async def generate(request: Request) -> Response:
        body = await request.json()
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        path = request.url.path
        prefill = await client.post(backends.next_prefill() + path, json=prefill_body(body), headers=headers)
        if prefill.status_code != 200:
            return Response(prefill.content, prefill.status_code, media_type=prefill.headers.get("content-type"))
        upstream = await client.send(client.build_request("POST", backends.next_decode() + path, json=body,
                                                          headers=headers), stream=True)
        return StreamingResponse(upstream.aiter_raw(), status_code=upstream.status_code,
                                 media_type=upstream.headers.get("content-type"),
                                 background=BackgroundTask(upstream.aclose))

    for route in ROUTES:
        app.add_api_route(route, generate, methods=["POST"])

    @app.get("/health")
    async def health() -> Response:
        for url in backends.prefill_urls + backends.decode_urls:
            try:
                reply = await client.get(url + "/health", timeout=5.0)
            except httpx.HTTPError as exc:
                return JSONResponse({"status": "unhealthy", "server": url, "error": str(exc)}, status_code=503)
            if reply.status_code != 200:
                return JSONResponse({"status": "unhealthy", "server": url}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/{path:path}")
    async def passthrough(path: str, request: Request) -> Response:
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED_HEADERS}
        reply = await client.get(f"{backends.next_decode()}/{path}", params=request.query_params, headers=headers)
        return Response(reply.content, reply.status_code, media_type=reply.headers.get("content-type"))

    return app
