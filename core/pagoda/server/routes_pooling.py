"""Pooling endpoints (runner "pooling"): ``/v1/embeddings``, ``/score`` and ``/rerank`` (see
``pooling_protocol.py`` for the shapes), plus the runner gates ``app.py`` puts on every router:
a generation endpoint on a pooling model, or a pooling endpoint on a generative one, is a 400.

Each input is one pooling request through the engine core's scheduler, awaited together; if one
fails or the client goes away, the others are aborted.
"""

from __future__ import annotations

import asyncio
import base64
import time

from fastapi import APIRouter, Request

from pagoda.entrypoints.pooling import cosine, pair_score, score_pairs, truncation_limit
from pagoda.errors import RequestError
from pagoda.pooling.outputs import PoolingRequestOutput
from pagoda.pooling_params import PoolingParams
from pagoda.server.errors import APIError, bad_request
from pagoda.server.openapi import ERRORS
from pagoda.server.pooling_protocol import (EmbeddingInput, EmbeddingRequest, EmbeddingResponse, RerankRequest,
                                            RerankResponse, ScoreRequest, ScoreResponse)
from pagoda.server.state import ServerState, engine_error
from pagoda.server.streaming import unless_disconnected

router = APIRouter()
Item = tuple[list[int], "str | None", PoolingParams]  # one pooling request: token ids, text, params


# -- runner gates (dependencies of whole routers, see app.py) ------------------------------------
async def generation_only(request: Request) -> None:
    if request.app.state.pagoda.engine.info.runner == "pooling":
        raise APIError(400, f"{request.url.path} generates text, and this server runs a pooling model (runner "
                            "'pooling'): use /v1/embeddings, /score or /rerank, or serve a generative model with "
                            "--runner generate", code="wrong_runner")


async def pooling_only(request: Request) -> None:
    if request.app.state.pagoda.engine.info.runner != "pooling":
        raise APIError(400, f"{request.url.path} needs a pooling model, and this server generates text (runner "
                            "'generate'): serve an embedding or cross-encoder model with --runner pooling",
                       code="wrong_runner")


# -- routes ------------------------------------------------------------------------------------
@router.post("/v1/embeddings", response_model=EmbeddingResponse, responses=ERRORS)
async def create_embeddings(body: EmbeddingRequest, request: Request) -> dict:
    """OpenAI's embeddings endpoint: one embedding per input (text or token ids)."""
    state: ServerState = request.app.state.pagoda
    model = state.check_model(body.model)
    info = state.engine.info.pooling
    if info.num_labels:
        raise APIError(400, "this model is a classifier (cross-encoder): it scores text pairs (/score, /rerank) and "
                            "has no embeddings", code="wrong_task")
    if body.dimensions is not None and not 1 <= body.dimensions <= info.hidden_size:
        raise APIError(400, f"dimensions must be in [1, {info.hidden_size}] (this model's embedding size), got "
                            f"{body.dimensions}", param="dimensions")
    params = _params(task="embed", dimensions=body.dimensions, normalize=body.normalize)
    inputs = await _inputs(state, body.input, body.truncate_prompt_tokens)
    request_id = state.engine.next_request_id("embd")
    outs = await _pool_all(state, request, request_id, [(ids, text, params) for ids, text in inputs], body.priority)
    data = [{"index": i, "object": "embedding", "embedding": _encode_vector(o, body.encoding_format)}
            for i, o in enumerate(outs)]
    tokens = sum(len(ids) for ids, _ in inputs)
    return {"id": request_id, "object": "list", "created": int(time.time()), "model": model, "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@router.post("/score", response_model=ScoreResponse, responses=ERRORS)
@router.post("/v1/score", response_model=ScoreResponse, responses=ERRORS)
async def create_score(body: ScoreRequest, request: Request) -> dict:
    """vLLM's score endpoint: a relevance score per (text_1, text_2) pair."""
    state: ServerState = request.app.state.pagoda
    model = state.check_model(body.model)
    try:
        pairs = score_pairs(body.text_1, body.text_2)
    except (ValueError, TypeError) as exc:
        raise APIError(400, str(exc), param="text_2") from exc
    request_id = state.engine.next_request_id("score")
    scores, tokens = await _scores(state, request, request_id, pairs, body.truncate_prompt_tokens, body.priority)
    data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
    return {"id": request_id, "object": "list", "created": int(time.time()), "model": model, "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


@router.post("/rerank", response_model=RerankResponse, responses=ERRORS)
@router.post("/v1/rerank", response_model=RerankResponse, responses=ERRORS)
@router.post("/v2/rerank", response_model=RerankResponse, responses=ERRORS)
async def create_rerank(body: RerankRequest, request: Request) -> dict:
    """The Jina/Cohere rerank endpoint: ``documents`` by relevance to ``query``, most relevant first."""
    state: ServerState = request.app.state.pagoda
    model = state.check_model(body.model)
    if not body.documents:
        raise APIError(400, "documents must not be empty", param="documents")
    if body.top_n is not None and body.top_n < 0:
        raise APIError(400, f"top_n must be >= 0 (0: all documents), got {body.top_n}", param="top_n")
    request_id = state.engine.next_request_id("rerank")
    pairs = [(body.query, doc) for doc in body.documents]
    scores, tokens = await _scores(state, request, request_id, pairs, body.truncate_prompt_tokens, body.priority)
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[: body.top_n or None]
    results = [{"index": i, "relevance_score": scores[i],
                "document": {"text": body.documents[i]} if body.return_documents else None} for i in order]
    return {"id": request_id, "model": model, "usage": {"total_tokens": tokens}, "results": results}


# -- helpers -----------------------------------------------------------------------------------
def _params(**fields) -> PoolingParams:
    try:
        return PoolingParams(**fields)
    except RequestError as exc:
        raise bad_request(exc) from exc


def _limit(state: ServerState, truncate: int | None) -> int | None:
    try:
        return truncation_limit(truncate, state.max_model_len)
    except ValueError as exc:
        raise APIError(400, str(exc), param="truncate_prompt_tokens") from exc


async def _inputs(state: ServerState, given: EmbeddingInput, truncate: int | None) -> list[tuple[list[int], str | None]]:
    """Token ids (and text) of each input; 400 for an empty, too long or out-of-vocabulary one."""
    if isinstance(given, str) or (given and all(isinstance(t, int) for t in given)):
        items: list = [given]
    else:
        items = list(given)
    if not items:
        raise APIError(400, "input must not be empty", param="input")
    limit = _limit(state, truncate)
    if any(isinstance(item, str) for item in items) and state.tokenizer is None:
        raise APIError(400, "text input needs the model's tokenizer (this server runs with --skip-tokenizer-init); "
                            "send token ids", param="input")
    encoded = [(ids, item if isinstance(item, str) else None)
               for ids, item in zip(await state.encode_texts(items, limit), items)]
    for ids, _ in encoded:
        _validate(state, ids, "input")
    return encoded


def _validate(state: ServerState, ids: list[int], param: str) -> None:
    try:
        state.engine.validate_pooling_prompt(ids)
    except RequestError as exc:
        raise APIError(400, str(exc), param=param) from exc


async def _scores(state: ServerState, request: Request, request_id: str, pairs: list[tuple[str, str]],
                  truncate: int | None, priority: int) -> tuple[list[float], int]:
    """A score per pair (a cross-encoder's on the pair, else the cosine of the two embeddings),
    and the prompt tokens it took."""
    limit = _limit(state, truncate)
    if state.tokenizer is None:
        raise APIError(400, "scoring text needs the model's tokenizer (this server runs with --skip-tokenizer-init)")
    if state.engine.info.pooling.num_labels:
        items = []
        for ids, segment_start in await state.encode_pairs(pairs, limit):
            _validate(state, ids, "text_2")
            items.append((ids, None, _params(task="score", segment_start=segment_start)))
        outs = await _pool_all(state, request, request_id, items, priority)
        return [pair_score(o.outputs.data) for o in outs], sum(len(o.prompt_token_ids) for o in outs)
    texts = list(dict.fromkeys(t for pair in pairs for t in pair))  # each distinct text embedded once
    params = _params(task="embed")
    items = [(ids, t, params) for ids, t in zip(await state.encode_texts(texts, limit), texts)]
    for ids, _, _ in items:
        _validate(state, ids, "text_1")
    outs = dict(zip(texts, await _pool_all(state, request, request_id, items, priority)))
    scores = [cosine(outs[a].outputs.data, outs[b].outputs.data) for a, b in pairs]
    return scores, sum(len(o.prompt_token_ids) for o in outs.values())


async def _pool_all(state: ServerState, request: Request, request_id: str, items: list[Item],
                    priority: int) -> list[PoolingRequestOutput]:
    """Run every item as one pooling request; all or nothing (the rest are aborted on a failure)."""
    state.check_available()
    try:
        return await unless_disconnected(request, _gather(state, request_id, items, priority))
    except APIError:
        raise
    except Exception as exc:
        raise engine_error(exc) from exc


async def _gather(state: ServerState, request_id: str, items: list[Item], priority: int) -> list[PoolingRequestOutput]:
    tasks = [asyncio.ensure_future(state.engine.encode(f"{request_id}-{i}", ids, params, text, priority))
             for i, (ids, text, params) in enumerate(items)]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _encode_vector(out: PoolingRequestOutput, encoding_format: str) -> list[float] | str:
    values = out.outputs.data.reshape(-1)
    if encoding_format == "base64":  # OpenAI's: little-endian float32 bytes
        return base64.b64encode(values.numpy().astype("<f4").tobytes()).decode("ascii")
    return values.tolist()
