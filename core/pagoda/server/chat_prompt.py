"""The prompt of a chat request: its messages rendered with the chat template (and its images processed),
shared by every chat-shaped route (``pagoda.server.chat_pipeline``) and ``/tokenize``."""

from __future__ import annotations

from pagoda.entrypoints.chat_template import ChatTemplateError, render_chat_text
from pagoda.multimodal.chat import split_images
from pagoda.multimodal_inputs import MultimodalItem
from pagoda.server.errors import APIError
from pagoda.server.images import text_only
from pagoda.server.protocol import ChatCompletionRequest, ChatMessage
from pagoda.server.state import ServerState


async def render_messages(state: ServerState, messages: list[ChatMessage], chat_template: str | None = None,
                          add_generation_prompt: bool = True, tools: list[dict] | None = None) -> tuple[str, list[int]]:
    """The prompt text and ids of a conversation (with ``tools`` for the template; tokenized off the event loop);
    400 when the template cannot render it faithfully."""
    text = _render(state, [m.as_template_dict() for m in messages], chat_template, add_generation_prompt, tools)
    return text, await state.encode(text, add_special_tokens=False)


def _render(state: ServerState, conversation: list[dict], chat_template: str | None, add_generation_prompt: bool,
            tools: list[dict] | None) -> str:
    try:
        return render_chat_text(state.tokenizer, conversation, chat_template, add_generation_prompt, tools)
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
        return (*await render_messages(state, messages, chat_template, add_generation_prompt, tools), None)
    if state.images is None:
        raise text_only()
    conversation, images = split_images([m.as_template_dict() for m in messages])
    text = _render(state, conversation, chat_template, add_generation_prompt, tools)
    processed = await state.images.process(text, images)
    return text, processed.prompt_token_ids, processed.items


def top_logprobs(body: ChatCompletionRequest) -> int | None:
    """The ``logprobs`` sampling value of a chat request (``top_logprobs`` only with ``logprobs``)."""
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs needs logprobs=true", param="top_logprobs")
    return (body.top_logprobs or 0) if body.logprobs else None
