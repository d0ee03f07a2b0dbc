"""``POST /v1/completions``: text completion for one or more prompts (strings or token ids)."""

from __future__ import annotations

import time
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.accumulate import choice_index, collect
from pagoda.server.beam_fields import beam_search_params
from pagoda.server.echo import Echo, generated_logprobs, join_logprobs
from pagoda.server.errors import APIError, error_body
from pagoda.server.openapi import event_stream
from pagoda.server.protocol import CompletionRequest, PromptInput
from pagoda.server.responses import CompletionChunk, CompletionResponse
from pagoda.server.state import ServerState, engine_error, sampling_params, usage
from pagoda.server.streaming import SSE_DONE, merge, sse, unless_disconnected

router = APIRouter()


async def encode_prompts(state: ServerState, prompt: PromptInput) -> list[tuple[list[int], str | None]]:
    """Token ids (and text, when given as text) of each prompt; 400 for empty or too long ones."""
    if isinstance(prompt, str):
        items: list = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        items = [prompt]
    else:
        items = list(prompt)
    if not items:
        raise APIError(400, "prompt must not be empty", param="prompt")
    encoded = [(ids, p if isinstance(p, str) else None) for ids, p in zip(await state.encode_texts(items), items)]
    for ids, _ in encoded:
        state.validate_prompt(ids)
    return encoded


@router.post("/v1/completions", response_model=CompletionResponse, responses=event_stream(CompletionChunk))
async def create_completion(body: CompletionRequest, request: Request):
    """OpenAI's completions endpoint (``stream``, ``n``, ``best_of``, ``logprobs``, ``echo``, vLLM's extra
    sampling fields and ``use_beam_search``)."""
    state: ServerState = request.app.state.pagoda
    model, lora = await state.resolve_model(body.model)
    echo = Echo.of(body.echo, body.logprobs, body.max_tokens)
    params = sampling_params(body, echo.max_tokens_to_run or body.max_tokens, body.logprobs)
    params.prompt_logprobs = echo.logprobs  # validated: the same range as logprobs
    beam = beam_search_params(body, params)
    if body.stream and (params.best_of or 1) > params.n:
        raise APIError(400, f"best_of={params.best_of} > n={params.n} cannot stream: the best {params.n} are known only "
                            "when all finish; set stream to false, or best_of to n", param="best_of")
    prompts = await encode_prompts(state, body.prompt)
    state.check_limits(params, [len(ids) for ids, _ in prompts])
    state.check_available()
    request_id = state.engine.next_request_id("cmpl")
    streams = [state.engine.generate(f"{request_id}-{i}", ids, params, text, body.priority, beam=beam,
                                     lora_request=lora)
               for i, (ids, text) in enumerate(prompts)]
    base = {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model}
    if body.stream:
        return StreamingResponse(_stream(base, body, state, echo, prompts, streams, params.n),
                                 media_type="text/event-stream")
    return await unless_disconnected(request, _whole(base, state, echo, prompts, streams, params.n))


async def _whole(base: dict, state: ServerState, echo: Echo, prompts, streams, n: int) -> dict:
    try:
        choices = await collect(merge(streams), n)
    except Exception as exc:
        raise engine_error(exc) from exc
    out = []
    for index, choice in choices.items():
        ids, text = prompts[index // n]
        prefix = echo.prompt_text(state.tokenizer, ids, text)
        generated = "" if echo.scoring_only else choice.text
        logprobs = join_logprobs(echo.prompt_logprobs(state.tokenizer, ids, choice.prompt_logprobs),
                                 generated_logprobs(choice.logprobs, choice.token_ids, len(prefix), echo))
        out.append({"index": index, "text": prefix + generated, "logprobs": logprobs,
                    "finish_reason": "length" if echo.scoring_only else choice.finish_reason})
    completion_tokens = 0 if echo.scoring_only else sum(len(c.token_ids) for c in choices.values())
    return {**base, "choices": out, "usage": usage(sum(len(ids) for ids, _ in prompts), completion_tokens)}


async def _stream(base: dict, body: CompletionRequest, state: ServerState, echo: Echo, prompts, streams,
                  n: int) -> AsyncIterator[bytes]:
    offsets: dict[int, int] = {}  # choice index -> characters sent so far
    completion_tokens = 0
    try:
        async for prompt_index, out in merge(streams):
            for delta in out.outputs:
                index = choice_index(prompt_index, n, delta)
                ids, text = prompts[prompt_index]
                first = index not in offsets
                prefix = echo.prompt_text(state.tokenizer, ids, text) if first else ""
                generated = "" if echo.scoring_only else delta.text
                offset = offsets.get(index, 0) + len(prefix)
                logprobs = generated_logprobs(delta.logprobs, delta.token_ids, offset, echo)
                if first:
                    logprobs = join_logprobs(echo.prompt_logprobs(state.tokenizer, ids, out.prompt_logprobs), logprobs)
                offsets[index] = offset + len(generated)
                completion_tokens += 0 if echo.scoring_only else len(delta.token_ids)
                finish = "length" if echo.scoring_only and delta.finish_reason else delta.finish_reason
                choice = {"index": index, "text": prefix + generated, "finish_reason": finish, "logprobs": logprobs}
                yield sse({**base, "choices": [choice]})
        if body.include_usage_in_stream:
            yield sse({**base, "choices": [], "usage": usage(sum(len(ids) for ids, _ in prompts), completion_tokens)})
    except Exception as exc:  # headers are sent: report in-band, then end the stream
        err = engine_error(exc)
        yield sse(error_body(err.status, err.message, err.param, err.code))
    yield SSE_DONE
