"""Render a conversation with the tokenizer's chat template (shared by the server and ``LLM.chat``)."""

from __future__ import annotations

from typing import Any


def render_chat(tokenizer: Any, conversation: list[dict], chat_template: str | None = None,
                add_generation_prompt: bool = True) -> tuple[str, list[int]]:
    """The rendered prompt text and its token ids. Raises ValueError when there is no template."""
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError("this tokenizer has no chat template; pass chat_template=... (a Jinja template)")
    text = tokenizer.apply_chat_template(
        conversation, chat_template=chat_template, add_generation_prompt=add_generation_prompt, tokenize=False
    )
    return text, tokenizer(text, add_special_tokens=False)["input_ids"]
