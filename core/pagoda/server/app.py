"""Build the FastAPI app: routes, OpenAI-shaped errors, API-key check, shutdown gate."""

from __future__ import annotations

import contextlib
import hmac
import json
from dataclasses import dataclass

from fastapi import Depends, FastAPI

from pagoda import __version__, envs
from pagoda.server import routes_chat, routes_completions, routes_lora, routes_misc, routes_pooling, routes_profile
from pagoda.server.adapters import ServedAdapters
from pagoda.server.anthropic_api import routes as routes_anthropic
from pagoda.server.async_engine import AsyncEngine
from pagoda.server.errors import APIError, error_payload, install_error_handlers
from pagoda.server.images import ServerImages
from pagoda.server.openapi import install_openapi
from pagoda.server.responses_api import routes as routes_responses
from pagoda.server.responses_api.store import ResponseStore
from pagoda.server.state import ServerState
from pagoda.server.tracing import TraceContextMiddleware
from pagoda.tools.plan import parser_class

OPEN_PATHS = ("/health", "/metrics")  # answer without an API key, and while draining
MAX_BODY_BYTES = 16 << 20  # a 128k-token prompt as JSON token ids is ~1 MiB


@dataclass(frozen=True)
class LoRAServing:
    """How a server serves LoRA adapters (docs/lora.md)."""

    enabled: bool = False  # the engine runs with --enable-lora
    runtime_updates: bool = False  # --allow-runtime-lora-updating: /v1/load_lora_adapter and unload answer
    shared: bool = False  # several API server processes: each re-reads the adapters every second


class GateMiddleware:
    """Plain ASGI middleware: 401 without the right API key (``Authorization: Bearer KEY`` or Anthropic's
    ``x-api-key: KEY``), 503 while shutting down, 413 for a body declared larger than ``MAX_BODY_BYTES``
    (a chunked one is cut off there: the request then reads as a disconnect)."""

    def __init__(self, app, state: ServerState) -> None:
        self.app = app
        self.state = state
        self._key = state.api_key.encode() if state.api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await self.app(scope, receive, send)
        if self._key is not None and not self._authorized(scope):
            return await _reply(send, scope, 401, "invalid or missing API key; send 'Authorization: Bearer <key>' "
                                                  "(or 'x-api-key: <key>')", code="invalid_api_key")
        if self.state.engine.draining:
            return await _reply(send, scope, 503, "the server is shutting down", code="engine_unavailable")
        declared = dict(scope.get("headers") or []).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            return await _reply(send, scope, 413, f"the request body ({int(declared)} bytes) is larger than the "
                                                  f"{MAX_BODY_BYTES} bytes this server reads", code="request_too_large")
        return await self.app(scope, _capped(receive), send)

    def _authorized(self, scope) -> bool:
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
        bearer = token.strip() if scheme.lower() == b"bearer" else b""
        api_key = headers.get(b"x-api-key", b"").strip()  # Anthropic's clients send the key here
        return hmac.compare_digest(bearer, self._key) | hmac.compare_digest(api_key, self._key)


def _capped(receive):
    """``receive`` that reports a disconnect once the body passes ``MAX_BODY_BYTES``."""
    seen = 0

    async def capped_receive():
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                return {"type": "http.disconnect"}
        return message

    return capped_receive


async def _reply(send, scope, status: int, message: str, code: str) -> None:
    body = json.dumps(error_payload(APIError(status, message, code=code), scope["path"])).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def build_app(engine: AsyncEngine, served_model_names: list[str], api_key: str | None = None,
              max_n: int = 16, tool_parser: str | None = None, reasoning_parser: str | None = None,
              lora: LoRAServing | None = None, images: ServerImages | None = None,
              responses_store: ResponseStore | None = None) -> FastAPI:
    """The OpenAI-compatible app over ``engine``; its lifespan starts and stops reading the core.
    ``tool_parser`` / ``reasoning_parser``: registered parser names (docs/tools.md); ``lora``: how LoRA
    adapters are served (docs/lora.md); ``images``: the model's image front end (None: text only;
    docs/multimodal.md); ``responses_store``: where /v1/responses keeps responses (docs/api_responses.md)."""
    state = ServerState(engine, served_model_names, api_key, max_n, tool_parser=parser_class("tool_parser", tool_parser),
                        reasoning_parser=parser_class("reasoning_parser", reasoning_parser))
    lora = lora or LoRAServing()
    state.adapters = ServedAdapters(engine, served_model_names, lora.enabled, lora.runtime_updates, lora.shared)
    state.images = images

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        engine.start()
        try:
            yield
        finally:
            engine.draining = True
            await engine.stop()

    app = FastAPI(title="Pagoda", version=__version__, lifespan=lifespan)
    app.state.pagoda = state
    app.state.responses_store = responses_store if responses_store is not None else ResponseStore()
    install_error_handlers(app)
    install_openapi(app)
    # 400 on a pooling model, and the pooling routes vice versa
    for module in (routes_completions, routes_chat, routes_responses, routes_anthropic):
        app.include_router(module.router, dependencies=[Depends(routes_pooling.generation_only)])
    app.include_router(routes_pooling.router, dependencies=[Depends(routes_pooling.pooling_only)])
    app.include_router(routes_misc.router)
    app.include_router(routes_lora.router)
    if envs.TORCH_PROFILER_DIR.get():
        app.include_router(routes_profile.router)
    app.add_middleware(GateMiddleware, state=state)
    if engine.observers.tracer is not None:  # the trace context of each request, for its spans
        app.add_middleware(TraceContextMiddleware)
    return app
