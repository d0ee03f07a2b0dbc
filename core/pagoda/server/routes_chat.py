"""``POST /v1/chat/completions``: messages rendered with the tokenizer's chat template, then generated."""

from __future__ import annotations

import time
from typing import AsyncIterator, Callable, Optional

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.accumulate import Choice, collect
from pagoda.server.chat_output import ChoiceParser, stream_choices
from pagoda.server.chat_tools import apply_plan, check_history, plan_tools
from pagoda.entrypoints.chat_template import ChatTemplateError, render_chat
from pagoda.multimodal.chat import split_images
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.server.beam_fields import beam_search_params
from pagoda.server.errors import APIError, error_body
from pagoda.server.images import text_only
from pagoda.server.openapi import event_stream
from pagoda.server.protocol import ChatCompletionRequest, ChatMessage
from pagoda.server.responses import ChatCompletionChunk, ChatCompletionResponse
from pagoda.server.state import ServerState, engine_error, sampling_params, usage
from pagoda.server.streaming import SSE_DONE, chat_logprobs, merge, sse, unless_disconnected
from pagoda.tools.plan import choice_parser_factory

router = APIRouter()


def render_messages(state: ServerState, messages: list[ChatMessage], chat_template: str | None = None,
                    add_generation_prompt: bool = True, tools: list[dict] | None = None) -> tuple[str, list[int]]:
    """The prompt text and ids of a conversation (with ``tools`` for the template); 400 when the
    template cannot render it faithfully."""
    return _render(state, [m.as_template_dict() for m in messages], chat_template, add_generation_prompt, tools)


def _render(state: ServerState, conversation: list[dict], chat_template: str | None, add_generation_prompt: bool,
            tools: list[dict] | None) -> tuple[str, list[int]]:
    try:
        return render_chat(state.tokenizer, conversation, chat_template, add_generation_prompt, tools)
    except ChatTemplateError as exc:  # no template, it raises, or it drops a message
        raise APIError(400, str(exc), param=exc.param) from exc
    except Exception as exc:  # anything else the template trips over (a TypeError in a filter, ...)
        raise APIError(400, f"cannot render the chat template: {exc}", param="messages") from exc


async def render_prompt(state: ServerState, messages: list[ChatMessage], chat_template: str | None = None,
                        add_generation_prompt: bool = True, tools: list[dict] | None = None,
                        ) -> tuple[str, list[int], list[MultimodalItem] | None]:
    """:func:`render_messages`, and for messages with image parts the images' items, each image's placeholder
    expanded in the ids (None without images)."""
    if not any(m.has_images for m in messages):
        return (*render_messages(state, messages, chat_template, add_generation_prompt, tools), None)
    if state.images is None:
        raise text_only()
    conversation, images = split_images([m.as_template_dict() for m in messages])
    text, _ = _render(state, conversation, chat_template, add_generation_prompt, tools)
    processed = await state.images.process(text, images)
    return text, processed.prompt_token_ids, processed.items


def _top_logprobs(body: ChatCompletionRequest) -> int | None:
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
    return (body.top_logprobs or 0) if body.logprobs else None


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=event_stream(ChatCompletionChunk))
async def create_chat_completion(body: ChatCompletionRequest, request: Request):
    """OpenAI's chat completions endpoint (``stream``, ``n``, ``logprobs``/``top_logprobs``, vLLM's extras)."""
    state: ServerState = request.app.state.pagoda
    model, lora = await state.resolve_model(body.model)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    requested = sampling_params(body, max_tokens, _top_logprobs(body))  # first: the 400s of unsupported fields
    check_history(body.messages)
    plan = plan_tools(body, state.tool_parser)
    params = apply_plan(requested, plan)
    text, ids, images = await render_prompt(state, body.messages, body.chat_template, body.add_generation_prompt,
                                            plan.template_tools)
    state.validate_prompt(ids)
    state.check_limits(params, [len(ids)])
    state.check_available()
    request_id = state.engine.next_request_id("chatcmpl")
    stream = state.engine.generate(request_id, ids, params, text, body.priority,
                                   beam=beam_search_params(body, params), lora_request=lora, mm_items=images)
    base = {"id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model}
    # each choice's reasoning / tool-call parser (None: the output is plain content)
    make_parser = choice_parser_factory(plan, state.reasoning_parser, state.tokenizer, params.guided_decoding)
    if body.stream:
        base["object"] = "chat.completion.chunk"
        return StreamingResponse(_stream(base, body, len(ids), stream, params.n, make_parser),
                                 media_type="text/event-stream")
    return await unless_disconnected(request, _whole(base, len(ids), stream, params.n, make_parser))


ParserFactory = Optional[Callable[[], ChoiceParser]]


def _message(choice: Choice, make_parser: ParserFactory) -> tuple[dict, str | None]:
    if make_parser is None:
        return {"role": "assistant", "content": choice.text}, choice.finish_reason
    return make_parser().message(choice.text, choice.finish_reason)


async def _whole(base: dict, num_prompt_tokens: int, stream, n: int, make_parser: ParserFactory = None) -> dict:
    try:
        choices = await collect(merge([stream]), n)
    except Exception as exc:
        raise engine_error(exc) from exc
    out = []
    for i, c in choices.items():
        message, finish_reason = _message(c, make_parser)
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
