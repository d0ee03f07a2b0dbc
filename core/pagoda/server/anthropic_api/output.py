"""Anthropic's message: content blocks (``thinking``, ``text``, ``tool_use``), ``stop_reason`` and ``usage``
from the chat pipeline's parsed reply."""

from __future__ import annotations

import json
from typing import Optional

from pagoda.server.reply_blocks import Block


def tool_use_id(call_id: str) -> str:
    """A tool call's id as Anthropic writes it (``toolu_...``)."""
    return "toolu_" + call_id.removeprefix("call_")


def content_block(block: Block, whole: bool = True) -> dict:
    """The content block of one reply block (``whole``: with its text; else as a stream starts it)."""
    if block.kind == "reasoning":
        return {"type": "thinking", "thinking": block.text if whole else "", "signature": ""}
    if block.kind == "text":
        return {"type": "text", "text": block.text if whole else ""}
    arguments = json.loads(block.text or "{}") if whole else {}
    return {"type": "tool_use", "id": tool_use_id(block.call_id or ""), "name": block.name, "input": arguments}


def stop_reason(finish_reason: Optional[str], stop: int | str | None,
                stop_sequences: Optional[list[str]]) -> tuple[str, Optional[str]]:
    """``stop_reason`` and ``stop_sequence`` for the chat finish reason and what stopped it."""
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if isinstance(stop, str) and stop in (stop_sequences or []):
        return "stop_sequence", stop
    return "end_turn", None


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict:
    """Anthropic's accounting: ``input_tokens`` are those not read from the (prefix) cache."""
    return {"input_tokens": prompt_tokens - cached_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached_tokens, "cache_creation_input_tokens": 0}


def message(message_id_: str, model: str, content: list[dict], reason: Optional[str], sequence: Optional[str],
            spent: dict) -> dict:
    return {"id": message_id_, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": spent}
