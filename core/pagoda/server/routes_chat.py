"""``POST /v1/chat/completions``: messages rendered with the tokenizer's chat template, then generated."""

from __future__ import annotations

from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.accumulate import collect
from pagoda.server.chat_output import ChoiceParser, stream_choices
from pagoda.server.chat_pipeline import ParserFactory, parsed_message, start_chat
from pagoda.server.errors import error_body
from pagoda.server.openapi import event_stream
from pagoda.server.protocol import ChatCompletionRequest
from pagoda.server.responses import ChatCompletionChunk, ChatCompletionResponse
from pagoda.server.state import engine_error, usage
from pagoda.server.streaming import SSE_DONE, chat_logprobs, merge, sse, unless_disconnected

router = APIRouter()


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=event_stream(ChatCompletionChunk))
async def create_chat_completion(body: ChatCompletionRequest, request: Request):
    """OpenAI's chat completions endpoint (``stream``, ``n``, ``logprobs``/``top_logprobs``, vLLM's extras)."""
    run = await start_chat(request.app.state.pagoda, body)
    base = {"id": run.request_id, "object": "chat.completion", "created": run.created, "model": run.model}
    if body.stream:
        base["object"] = "chat.completion.chunk"
        return StreamingResponse(_stream(base, body, len(run.prompt_ids), run.outputs, run.params.n, run.make_parser),
                                 media_type="text/event-stream")
    return await unless_disconnected(request, _whole(base, len(run.prompt_ids), run.outputs, run.params.n,
                                                     run.make_parser))


async def _whole(base: dict, num_prompt_tokens: int, stream, n: int, make_parser: ParserFactory = None) -> dict:
    try:
        choices = await collect(merge([stream]), n)
    except Exception as exc:
        raise engine_error(exc) from exc
    out = []
    for i, c in choices.items():
        message, finish_reason = parsed_message(c, make_parser)
        out.append({"index": i, "message": message, "finish_reason": finish_reason,
                    "logprobs": chat_logprobs(c.logprobs, c.token_ids)})
    completion_tokens = sum(len(c.token_ids) for c in choices.values())
    return {**base, "choices": out, "usage": usage(num_prompt_tokens, completion_tokens)}


async def _stream(base: dict, body: ChatCompletionRequest, num_prompt_tokens: int, stream, n: int,
                  make_parser: ParserFactory = None) -> AsyncIterator[bytes]:
    completion_tokens = 0
    parsers: dict[int, ChoiceParser] = {}
    try:
        # the first chunk of each choice names the role; as OpenAI's, its content is null when the
        # reply may be tool calls or reasoning only (clients append to it either way)
        first = {"role": "assistant", "content": "" if make_parser is None else None}
        for i in range(n):
            yield sse({**base, "choices": [{"index": i, "delta": first,
                                            "logprobs": None, "finish_reason": None}]})
        async for _, out in merge([stream]):
            for delta in out.outputs:
                completion_tokens += len(delta.token_ids)
                if make_parser is not None:
                    parser = parsers.get(delta.index) or parsers.setdefault(delta.index, make_parser())
                    for choice in stream_choices(parser, delta.index, delta.text, delta.finish_reason,
                                                 chat_logprobs(delta.logprobs, delta.token_ids)):
                        yield sse({**base, "choices": [choice]})
                    continue
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
