"""``POST /v1/chat/completions``: messages rendered with the tokenizer's chat template, then generated."""

from __future__ import annotations

import time
from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.accumulate import collect
from pagoda.entrypoints.chat_template import ChatTemplateError, render_chat
from pagoda.server.errors import APIError, error_body
from pagoda.server.openapi import event_stream
from pagoda.server.protocol import ChatCompletionRequest, ChatMessage
from pagoda.server.responses import ChatCompletionChunk, ChatCompletionResponse
from pagoda.server.state import ServerState, engine_error, sampling_params, usage
from pagoda.server.streaming import SSE_DONE, chat_logprobs, merge, sse, unless_disconnected

router = APIRouter()


def render_messages(state: ServerState, messages: list[ChatMessage], chat_template: str | None = None,
                    add_generation_prompt: bool = True) -> tuple[str, list[int]]:
    """The prompt text and ids of a conversation; 400 when the template cannot render it faithfully."""
    try:
        return render_chat(state.tokenizer, [m.as_template_dict() for m in messages], chat_template,
                           add_generation_prompt)
    except ChatTemplateError as exc:  # no template, it raises, or it drops a message
        raise APIError(400, str(exc), param=exc.param) from exc
    except Exception as exc:  # anything else the template trips over (a TypeError in a filter, ...)
        raise APIError(400, f"cannot render the chat template: {exc}", param="messages") from exc


def _top_logprobs(body: ChatCompletionRequest) -> int | None:
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
    return (body.top_logprobs or 0) if body.logprobs else None


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=event_stream(ChatCompletionChunk))
async def create_chat_completion(body: ChatCompletionRequest, request: Request):
    """OpenAI's chat completions endpoint (``stream``, ``n``, ``logprobs``/``top_logprobs``, vLLM's extras)."""
    state: ServerState = request.app.state.pagoda
    model = state.check_model(body.model)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    params = sampling_params(body, max_tokens, _top_logprobs(body))
    text, ids = render_messages(state, body.messages, body.chat_template, body.add_generation_prompt)
    state.validate_prompt(ids)
    state.check_limits(params, [len(ids)])
    state.check_available()
    request_id = state.engine.next_request_id("chatcmpl")
    stream = state.engine.generate(request_id, ids, params, text, body.priority)
    base = {"id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model}
    if body.stream:
        base["object"] = "chat.completion.chunk"
        return StreamingResponse(_stream(base, body, len(ids), stream, params.n), media_type="text/event-stream")
    return await unless_disconnected(request, _whole(base, len(ids), stream, params.n))


async def _whole(base: dict, num_prompt_tokens: int, stream, n: int) -> dict:
    try:
        choices = await collect(merge([stream]), n)
    except Exception as exc:
        raise engine_error(exc) from exc
    out = [{"index": i, "message": {"role": "assistant", "content": c.text}, "finish_reason": c.finish_reason,
            "logprobs": chat_logprobs(c.logprobs, c.token_ids)} for i, c in choices.items()]
    completion_tokens = sum(len(c.token_ids) for c in choices.values())
    return {**base, "choices": out, "usage": usage(num_prompt_tokens, completion_tokens)}


async def _stream(base: dict, body: ChatCompletionRequest, num_prompt_tokens: int, stream, n: int) -> AsyncIterator[bytes]:
    completion_tokens = 0
    try:
        for i in range(n):  # the first chunk of each choice names the role
            yield sse({**base, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                            "logprobs": None, "finish_reason": None}]})
        async for _, out in merge([stream]):
            for delta in out.outputs:
                completion_tokens += len(delta.token_ids)
                content = {"content": delta.text} if delta.text or not delta.finish_reason else {}
                yield sse({**base, "choices": [{"index": delta.index, "delta": content,
                                                "logprobs": chat_logprobs(delta.logprobs, delta.token_ids),
                                                "finish_reason": delta.finish_reason}]})
        if body.include_usage_in_stream:
            yield sse({**base, "choices": [], "usage": usage(num_prompt_tokens, completion_tokens)})
    except Exception as exc:  # headers are sent: report in-band, then end the stream
        err = engine_error(exc)
        yield sse(error_body(err.status, err.message, err.param, err.code))
    yield SSE_DONE
