"""Models list, tokenize/detokenize, health, version, Prometheus metrics and the prefix-cache reset."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from pagoda import __version__
from pagoda.server.errors import APIError, error_body
from pagoda.server.openapi import ERRORS
from pagoda.server.protocol import DetokenizeRequest, TokenizeRequest
from pagoda.server.responses import (DetokenizeResponse, ErrorResponse, HealthResponse, ModelList, TokenizeResponse,
                                     VersionResponse)
from pagoda.server.chat_prompt import render_prompt
from pagoda.server.state import ServerState

router = APIRouter()


def _state(request: Request) -> ServerState:
    return request.app.state.pagoda


@router.get("/v1/models", response_model=ModelList, responses=ERRORS)
async def list_models(request: Request) -> dict:
    state = _state(request)
    card = {"object": "model", "created": state.created, "owned_by": "pagoda", "max_model_len": state.max_model_len}
    data = [{**card, "id": name, "root": name, "parent": None} for name in state.served_model_names]
    if state.adapters is not None:  # LoRA adapters, each with its base model as parent
        await state.adapters.refresh()
        data += [{**card, "id": name, "root": lora.lora_path, "parent": state.model_name}
                 for name, lora in state.adapters.by_name.items()]
    return {"object": "list", "data": data}


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERRORS)
async def tokenize(body: TokenizeRequest, request: Request) -> dict:
    """Token ids of ``prompt``, or of ``messages`` rendered with the chat template (vLLM's shape;
    ``return_token_strs`` adds each token's string)."""
    state = _state(request)
    state.check_model(body.model)
    _check_tokenizer(state, "/tokenize")
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "give exactly one of prompt or messages", param="prompt")
    if body.messages is not None:
        _, ids, _ = await render_prompt(state, body.messages, add_generation_prompt=body.add_generation_prompt)
    else:
        ids = await state.encode(body.prompt, add_special_tokens=body.add_special_tokens)
    strs = state.tokenizer.convert_ids_to_tokens(ids) if body.return_token_strs else None
    return {"tokens": ids, "count": len(ids), "max_model_len": state.max_model_len, "token_strs": strs}


def _check_tokenizer(state: ServerState, route: str) -> None:
    if state.tokenizer is None:
        raise APIError(400, f"{route} needs the model's tokenizer, and this server runs with --skip-tokenizer-init; "
                            "restart it without that flag")


@router.post("/detokenize", response_model=DetokenizeResponse, responses=ERRORS)
async def detokenize(body: DetokenizeRequest, request: Request) -> dict:
    state = _state(request)
    state.check_model(body.model)
    _check_tokenizer(state, "/detokenize")
    vocab = len(state.tokenizer)
    bad = [t for t in body.tokens if not 0 <= t < vocab]
    if bad:
        raise APIError(400, f"tokens must be ids in [0, {vocab}); got {bad[:5]}", param="tokens")
    return {"prompt": state.tokenizer.decode(body.tokens)}


@router.get("/health", response_model=HealthResponse,
            responses={503: {"model": ErrorResponse, "description": "the engine failed, or the server is draining"}})
async def health(request: Request):
    reason = _state(request).engine.unavailable_reason()
    if reason is not None:
        return JSONResponse(error_body(503, reason, code="engine_unavailable"), status_code=503)
    return {"status": "ok"}


@router.get("/version", response_model=VersionResponse, responses=ERRORS)
async def version() -> dict:
    return {"version": __version__}


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> PlainTextResponse:
    body = await _state(request).engine.render_metrics()
    return PlainTextResponse(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.post("/reset_prefix_cache", responses=ERRORS)
async def reset_prefix_cache(request: Request) -> dict:
    """Forget every cached prompt prefix (vLLM's route): later requests compute their prompts in full. Benchmarks
    call it between runs, so that one run's prompts are no cache hits for the next."""
    await _state(request).engine.call_utility("reset_prefix_cache", timeout=60.0)
    return {}
