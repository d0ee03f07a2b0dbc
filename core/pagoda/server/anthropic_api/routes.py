"""Anthropic's Messages API: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``
(docs/api_anthropic.md). Errors take Anthropic's shape (``pagoda.server.errors``)."""

from __future__ import annotations

from typing import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from pagoda.server.anthropic_api.events import MessageEvents
from pagoda.server.anthropic_api.output import content_block, message, stop_reason, usage
from pagoda.server.anthropic_api.protocol import CountTokensRequest, MessagesRequest, check_fields
from pagoda.server.anthropic_api.schema import ANTHROPIC_ERRORS, MessageObject, MessageStreamEvent, TokenCount
from pagoda.server.anthropic_api.translate import translate
from pagoda.server.chat_pipeline import ChatRun, prepare_chat, reply_deltas, start_chat, whole_reply
from pagoda.server.errors import APIError
from pagoda.server.openapi import typed_event_stream
from pagoda.server.reply_blocks import whole_blocks
from pagoda.server.state import ServerState, engine_error
from pagoda.server.streaming import unless_disconnected

router = APIRouter()


@router.post("/v1/messages", response_model=MessageObject,
             responses=typed_event_stream(MessageStreamEvent, ANTHROPIC_ERRORS))
async def create_message(body: MessagesRequest, request: Request):
    """A message in reply to ``messages`` (after ``system``); ``stream`` for Anthropic's events."""
    state: ServerState = request.app.state.pagoda
    check_fields(body)
    translated = translate(body)
    try:
        run = await start_chat(state, translated.chat, prefix="msg")
    except APIError as exc:
        raise translated.rename(exc) from None
    if body.stream:
        return StreamingResponse(_stream(body, run), media_type="text/event-stream")
    return await unless_disconnected(request, _whole(body, run))


@router.post("/v1/messages/count_tokens", response_model=TokenCount, responses=ANTHROPIC_ERRORS)
async def count_tokens(body: CountTokensRequest, request: Request) -> dict:
    """The prompt tokens ``/v1/messages`` would read for the same system, messages and tools."""
    check_fields(body)
    translated = translate(body)
    # the tools reach the template whatever the choice; "none" needs no tool-call parser to count them
    counted = translated.chat.model_copy(update={"tool_choice": "none"}) if translated.chat.tools else translated.chat
    try:
        chat = await prepare_chat(request.app.state.pagoda, counted)
    except APIError as exc:
        raise translated.rename(exc) from None
    return {"input_tokens": len(chat.prompt_ids)}


def _id(run: ChatRun) -> str:
    return "msg_" + run.request_id.partition("-")[2]


async def _whole(body: MessagesRequest, run: ChatRun) -> dict:
    try:
        reply = await whole_reply(run)
    except Exception as exc:
        raise engine_error(exc) from exc
    reason, sequence = stop_reason(reply.finish_reason, reply.stop_reason, body.stop_sequences)
    content = [content_block(block) for block in whole_blocks(reply.message)]
    return message(_id(run), run.model, content, reason, sequence,
                   usage(reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens))


async def _stream(body: MessagesRequest, run: ChatRun) -> AsyncIterator[bytes]:
    events = MessageEvents()
    for event in events.start(message(_id(run), run.model, [], None, None, usage(len(run.prompt_ids), 0, 0))):
        yield event
    tokens = cached = 0
    try:
        async for delta in reply_deltas(run):
            tokens, cached = tokens + delta.num_tokens, max(cached, delta.cached_tokens)
            for chat_delta in delta.deltas:
                for event in events.feed(chat_delta):
                    yield event
            if delta.finish_reason is not None:
                for event in events.finish():
                    yield event
                reason, sequence = stop_reason(delta.finish_reason, delta.stop_reason, body.stop_sequences)
                for event in events.done(reason, sequence, usage(len(run.prompt_ids), tokens, cached)):
                    yield event
    except Exception as exc:  # headers are sent: report in-band
        err = engine_error(exc)
        yield events.fail(err.status, err.message)
