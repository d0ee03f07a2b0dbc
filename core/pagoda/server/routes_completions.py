"""``POST /v1/completions``: text completion for one or more prompts (strings or token ids)."""

from __future__ import annotations

import time
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.accumulate import choice_index, collect
from pagoda.server.errors import APIError, error_body
from pagoda.server.openapi import event_stream
from pagoda.server.protocol import CompletionRequest, PromptInput
from pagoda.server.responses import CompletionChunk, CompletionResponse
from pagoda.server.state import ServerState, engine_error, sampling_params, usage
from pagoda.server.streaming import SSE_DONE, completion_logprobs, merge, sse, unless_disconnected

router = APIRouter()


def encode_prompts(state: ServerState, prompt: PromptInput) -> list[tuple[list[int], str | None]]:
    """Token ids (and text, when given as text) of each prompt; 400 for empty or too long ones."""
    if isinstance(prompt, str):
        items: list = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise APIError(400, "prompt must not be empty", param="prompt")
    encoded = [(state.tokenizer(p)["input_ids"], p) if isinstance(p, str) else (list(p), None) for p in items]
    for ids, _ in encoded:
        state.validate_prompt(ids)
    return encoded


@router.post("/v1/completions", response_model=CompletionResponse, responses=event_stream(CompletionChunk))
async def create_completion(body: CompletionRequest, request: Request):
    """OpenAI's completions endpoint (``stream``, ``n``, ``logprobs``, ``echo``, vLLM's extra sampling fields)."""
    state: ServerState = request.app.state.pagoda
    model = state.check_model(body.model)
    params = sampling_params(body, body.max_tokens, body.logprobs)
    prompts = encode_prompts(state, body.prompt)
    state.check_limits(params, [len(ids) for ids, _ in prompts])
    state.check_available()
    request_id = state.engine.next_request_id("cmpl")
    streams = [state.engine.generate(f"{request_id}-{i}", ids, params, text, body.priority)
               for i, (ids, text) in enumerate(prompts)]
    base = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model}
    if body.stream:
        return StreamingResponse(_stream(base, body, prompts, streams, params.n), media_type="text/event-stream")
    return await unless_disconnected(request, _whole(base, body, prompts, streams, params.n))


async def _whole(base: dict, body: CompletionRequest, prompts, streams, n: int) -> dict:
    try:
        choices = await collect(merge(streams), n)
    except Exception as exc:
        raise engine_error(exc) from exc
    out = []
    for index, choice in choices.items():
        prefix = (prompts[index // n][1] or "") if body.echo else ""
        out.append({"index": index, "text": prefix + choice.text, "finish_reason": choice.finish_reason,
                    "logprobs": completion_logprobs(choice.logprobs, choice.token_ids, len(prefix))})
    completion_tokens = sum(len(c.token_ids) for c in choices.values())
    return {**base, "choices": out, "usage": usage(sum(len(ids) for ids, _ in prompts), completion_tokens)}


async def _stream(base: dict, body: CompletionRequest, prompts, streams, n: int) -> AsyncIterator[bytes]:
    offsets: dict[int, int] = {}
    completion_tokens = 0
    try:
        async for prompt_index, out in merge(streams):
            for delta in out.outputs:
                index = choice_index(prompt_index, n, delta)
                text = delta.text
                if index not in offsets:
                    text = ((prompts[prompt_index][1] or "") if body.echo else "") + text
                    offsets[index] = len(text) - len(delta.text)
                completion_tokens += len(delta.token_ids)
                choice = {"index": index, "text": text, "finish_reason": delta.finish_reason,
                          "logprobs": completion_logprobs(delta.logprobs, delta.token_ids, offsets[index])}
                offsets[index] += len(delta.text)
                yield sse({**base, "choices": [choice]})
        if body.include_usage_in_stream:
            yield sse({**base, "choices": [], "usage": usage(sum(len(ids) for ids, _ in prompts), completion_tokens)})
    except Exception as exc:  # headers are sent: report in-band, then end the stream
        err = engine_error(exc)
        yield sse(error_body(err.status, err.message, err.param, err.code))
    yield SSE_DONE
