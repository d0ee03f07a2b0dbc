"""The one path every chat-shaped request takes: OpenAI's Chat Completions, OpenAI's Responses and
Anthropic's Messages (``pagoda.server.responses_api``, ``pagoda.server.anthropic_api``) each translate
their request into a :class:`~pagoda.server.protocol.ChatCompletionRequest`, start it here (sampling
parameters, tools, structured output, the chat template, images, the LoRA adapter its ``model`` names,
the limits) and translate the parsed output back: a whole message, or the message deltas of a stream.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, AsyncIterator, Callable, Optional

from pagoda.outputs import RequestOutput
from pagoda.sampling_params import SamplingParams
from pagoda.server.accumulate import Choice
from pagoda.server.beam_fields import beam_search_params
from pagoda.server.chat_prompt import render_prompt, top_logprobs
from pagoda.server.chat_tools import apply_plan, check_history, plan_tools
from pagoda.server.errors import APIError
from pagoda.server.protocol import ChatCompletionRequest
from pagoda.server.state import ServerState, engine_error, sampling_params
from pagoda.server.streaming import merge
from pagoda.tools.choice import ChoiceParser
from pagoda.tools.plan import choice_parser_factory

if TYPE_CHECKING:
    from pagoda.lora_request import LoRARequest
    from pagoda.multimodal_inputs import MultimodalItem

ParserFactory = Optional[Callable[[], ChoiceParser]]


@dataclass
class ChatRun:
    """A chat request sent to the engine: its outputs are read from ``outputs`` (an async iterator that
    aborts the request when closed early)."""

    model: str  # the name to answer with (a served name or a LoRA adapter's)
    request_id: str
    created: int
    prompt_ids: list[int]
    params: SamplingParams
    outputs: AsyncIterator[RequestOutput]
    make_parser: ParserFactory  # each choice's reasoning / tool-call parser (None: plain content)


@dataclass
class PreparedChat:
    """A chat request checked and rendered, not sent yet."""

    model: str
    lora: "LoRARequest | None"
    text: str  # the rendered prompt
    prompt_ids: list[int]
    images: "list[MultimodalItem] | None"
    params: SamplingParams
    make_parser: ParserFactory


async def prepare_chat(state: ServerState, body: ChatCompletionRequest) -> PreparedChat:
    """Validate ``body`` and render its prompt; a 400/404/503 :class:`APIError` for what cannot run."""
    model, lora = await state.resolve_model(body.model)
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    requested = sampling_params(body, max_tokens, top_logprobs(body))  # first: the 400s of unsupported fields
    check_history(body.messages)
    plan = plan_tools(body, state.tool_parser)
    params = apply_plan(requested, plan)
    text, ids, images = await render_prompt(state, body.messages, body.chat_template, body.add_generation_prompt,
                                            plan.template_tools)
    state.validate_prompt(ids)
    state.check_limits(params, [len(ids)])
    make_parser = choice_parser_factory(plan, state.reasoning_parser, state.tokenizer, params.guided_decoding)
    return PreparedChat(model, lora, text, ids, images, params, make_parser)


async def start_chat(state: ServerState, body: ChatCompletionRequest, prefix: str = "chatcmpl") -> ChatRun:
    """Validate ``body`` and send it to the engine; a 400/404/503 :class:`APIError` for what cannot run."""
    chat = await prepare_chat(state, body)
    state.check_available()
    request_id = state.engine.next_request_id(prefix)
    outputs = state.engine.generate(request_id, chat.prompt_ids, chat.params, chat.text, body.priority,
                                    beam=beam_search_params(body, chat.params), lora_request=chat.lora,
                                    mm_items=chat.images)
    return ChatRun(chat.model, request_id, int(time.time()), chat.prompt_ids, chat.params, outputs, chat.make_parser)


def parsed_message(choice: Choice, make_parser: ParserFactory) -> tuple[dict, Optional[str]]:
    """OpenAI's assistant message of a whole choice (``content``, ``reasoning_content``, ``tool_calls``)
    and its finish reason (``tool_calls`` when it called tools)."""
    if make_parser is None:
        return {"role": "assistant", "content": choice.text}, choice.finish_reason
    return make_parser().message(choice.text, choice.finish_reason)


@dataclass
class WholeReply:
    """The one choice of a request, parsed."""

    message: dict  # OpenAI's assistant message
    finish_reason: Optional[str]  # stop, length, tool_calls, abort
    stop_reason: int | str | None  # the stop string or token id that ended it
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens served from the prefix cache


async def whole_reply(run: ChatRun) -> WholeReply:
    """Wait for a one-choice request to finish and parse its output."""
    choice, cached = Choice(0), 0
    try:
        async for _, out in merge([run.outputs]):
            cached = max(cached, out.num_cached_tokens)
            for delta in out.outputs:
                choice.add(delta)
    except Exception as exc:
        raise engine_error(exc) from exc
    message, finish_reason = parsed_message(choice, run.make_parser)
    return WholeReply(message, finish_reason, choice.stop_reason, len(run.prompt_ids), len(choice.token_ids), cached)


@dataclass
class ReplyDelta:
    """What one engine output adds to a one-choice stream: OpenAI's message deltas (``content``,
    ``reasoning_content``, ``tool_calls`` entries), the tokens it took, and at the end the finish reason."""

    deltas: list[dict]
    num_tokens: int
    finish_reason: Optional[str] = None  # stop, length, tool_calls, abort (the last delta only)
    stop_reason: int | str | None = None
    cached_tokens: int = 0


async def reply_deltas(run: ChatRun) -> AsyncIterator[ReplyDelta]:
    """The message deltas of a one-choice request as the engine produces them (the same parser as the
    whole reply: the deltas add up to :func:`whole_reply`'s message)."""
    parser = run.make_parser() if run.make_parser is not None else None
    async for _, out in merge([run.outputs]):
        for delta in out.outputs:
            yield _reply_delta(parser, delta, out.num_cached_tokens)


def _reply_delta(parser: Optional[ChoiceParser], delta, cached_tokens: int) -> ReplyDelta:
    if parser is None:
        deltas = [{"content": delta.text}] if delta.text else []
        return ReplyDelta(deltas, len(delta.token_ids), delta.finish_reason, delta.stop_reason, cached_tokens)
    deltas = parser.feed(delta.text) if delta.text else []
    finish = delta.finish_reason
    if finish is not None:
        deltas += parser.finish()
        finish = parser.finish_reason(finish, bool(parser.calls))
    return ReplyDelta(deltas, len(delta.token_ids), finish, delta.stop_reason, cached_tokens)


def need(condition: bool, message: str, param: Optional[str]) -> None:
    """A 400 naming ``param`` unless ``condition`` holds (the translations' checks)."""
    if not condition:
        raise APIError(400, message, param=param)
