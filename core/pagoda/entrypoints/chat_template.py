"""Render a conversation with the tokenizer's chat template (shared by the server and ``LLM.chat``).

A template may reject a conversation (Jinja's ``raise_exception``, e.g. "roles must alternate") or
silently leave a message out (a role it has no branch for). Both are a :class:`ChatTemplateError`:
every message with text is rendered once more with a unique marker as its content, and a marker
missing from that prompt names the message the template dropped.
"""

from __future__ import annotations

import secrets
from typing import Any

import jinja2


class ChatTemplateError(ValueError):
    """A conversation the chat template cannot render faithfully; ``param`` names the request field."""

    def __init__(self, message: str, param: str = "messages") -> None:
        super().__init__(message)
        self.param = param


def render_chat(tokenizer: Any, conversation: list[dict], chat_template: str | None = None,
                add_generation_prompt: bool = True, tools: list[dict] | None = None) -> tuple[str, list[int]]:
    """The rendered prompt text (:func:`render_chat_text`) and its token ids."""
    text = render_chat_text(tokenizer, conversation, chat_template, add_generation_prompt, tools)
    return text, tokenizer(text, add_special_tokens=False)["input_ids"]


def render_chat_text(tokenizer: Any, conversation: list[dict], chat_template: str | None = None,
                     add_generation_prompt: bool = True, tools: list[dict] | None = None) -> str:
    """The rendered prompt text, to be tokenized without special tokens (the template has them). Raises
    ChatTemplateError when there is no template, the template raises, or it drops a message. ``tools`` (OpenAI's
    ``[{"type": "function", "function": {...}}]``) go to the template as transformers' ``tools``."""
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ChatTemplateError("this tokenizer has no chat template; pass chat_template=... (a Jinja template)",
                                param="chat_template")
    text = _apply(tokenizer, conversation, chat_template, add_generation_prompt, tools)
    dropped = dropped_messages(tokenizer, conversation, chat_template, add_generation_prompt, tools)
    if dropped:
        raise _dropped_error(conversation, dropped)
    return text


def _apply(tokenizer: Any, conversation: list[dict], chat_template: str | None, add_generation_prompt: bool,
           tools: list[dict] | None = None) -> str:
    try:
        return tokenizer.apply_chat_template(conversation, chat_template=chat_template, tools=tools,
                                             add_generation_prompt=add_generation_prompt, tokenize=False)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template is not valid Jinja (line {exc.lineno}: {exc.message})",
                                param="chat_template") from exc
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"the chat template rejects this conversation: {exc}") from exc


def _has_text(message: dict) -> bool:
    content = message.get("content")
    return isinstance(content, str) and bool(content.strip())


def dropped_messages(tokenizer: Any, conversation: list[dict], chat_template: str | None = None,
                     add_generation_prompt: bool = True, tools: list[dict] | None = None) -> list[int]:
    """Indices of the messages with text that the template leaves out of the prompt."""
    nonce = secrets.token_hex(4)
    markers = {i: f"pagoda{nonce}m{i}e" for i, m in enumerate(conversation) if _has_text(m)}
    marked = [{**m, "content": markers[i]} if i in markers else m for i, m in enumerate(conversation)]
    try:
        rendered = _apply(tokenizer, marked, chat_template, add_generation_prompt, tools).lower()
    except ChatTemplateError:
        return []  # the template reacts to the content itself: the real render was accepted, keep it
    return [i for i, marker in markers.items() if marker not in rendered]


def _dropped_error(conversation: list[dict], dropped: list[int]) -> ChatTemplateError:
    first = dropped[0]
    role = conversation[first].get("role")
    kept = sorted({str(m.get("role")) for i, m in enumerate(conversation) if i not in dropped})
    others = f" (of this conversation it renders roles {', '.join(kept)})" if kept else ""
    return ChatTemplateError(
        f"messages[{first}] (role '{role}') would be silently dropped: this model's chat template does not render "
        f"it{others}; send that text with a role the template renders, or pass a chat_template that renders "
        f"role '{role}'", param=f"messages.{first}.role")
