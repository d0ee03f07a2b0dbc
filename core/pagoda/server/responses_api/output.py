"""The Responses API's answer: the ``response`` object and its typed output items (``reasoning``,
``message``, ``function_call``) built from the chat pipeline's parsed assistant message."""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable, Optional

from pagoda.server.chat_pipeline import WholeReply
from pagoda.server.reply_blocks import Block, whole_blocks
from pagoda.server.responses_api.protocol import ResponsesRequest


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def message_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": [text_part(text)]}


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(item_id: str, text: str, status: str = "completed") -> dict:
    return {"id": item_id, "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": text}],
            "status": status}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict:
    return {"id": item_id, "type": "function_call", "call_id": call_id, "name": name, "arguments": arguments,
            "status": status}


def block_item(block: Block, status: str = "completed") -> dict:
    """The output item of one reply block (a new id)."""
    if block.kind == "reasoning":
        return reasoning_item(new_id("rs"), block.text, status)
    if block.kind == "text":
        return message_item(new_id("msg"), block.text, status)
    return function_call_item(new_id("fc"), block.call_id or "", block.name or "", block.text, status)


def output_items(reply: WholeReply) -> list[dict]:
    """Reasoning, then the message (left out when the reply is only tool calls), then each call."""
    status = item_status(reply.finish_reason)
    return [block_item(block, status if block.kind == "text" else "completed") for block in whole_blocks(reply.message)]


def item_status(finish_reason: Optional[str]) -> str:
    return "incomplete" if finish_reason in ("length", "abort") else "completed"


def response_status(finish_reason: Optional[str]) -> tuple[str, Optional[dict]]:
    """The response's ``status`` and ``incomplete_details`` for the chat finish reason."""
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    if finish_reason == "abort":
        return "cancelled", None
    return "completed", None


def usage(prompt_tokens: int, output_tokens: int, cached_tokens: int, reasoning_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens, "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + output_tokens}


def reasoning_tokens(items: list[dict], count: Callable[[str], int]) -> int:
    """Tokens of the reasoning items' text (counted again with the tokenizer)."""
    return sum(count(part["text"]) for item in items if item["type"] == "reasoning" for part in item["content"])


def response_object(body: ResponsesRequest, response_id: str, model: str, created_at: int, *, status: str,
                    output: list[dict], usage: Optional[dict], store: bool, incomplete: Optional[dict] = None,
                    error: Optional[dict] = None) -> dict[str, Any]:
    """The ``response`` object: the request's settings, the status and the output so far."""
    return {
        "id": response_id, "object": "response", "created_at": created_at, "status": status,
        "completed_at": int(time.time()) if status == "completed" else None, "background": body.background,
        "error": error, "incomplete_details": incomplete, "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens, "max_tool_calls": None, "metadata": body.metadata or {},
        "model": model, "output": output, "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": body.previous_response_id, "reasoning": {"effort": None, "summary": None},
        "service_tier": "default", "store": store,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "text": {"format": (body.text or {}).get("format") or {"type": "text"}},
        "tool_choice": body.tool_choice if body.tool_choice is not None else "auto",
        "tools": body.tools or [], "top_p": 1.0 if body.top_p is None else body.top_p, "truncation": "disabled",
        "usage": usage, "user": body.user, "safety_identifier": body.safety_identifier,
        "prompt_cache_key": body.prompt_cache_key,
    }
