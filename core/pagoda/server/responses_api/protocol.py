"""The request of OpenAI's Responses API (``POST /v1/responses``), as this server reads it.

Every field of OpenAI's request is either honoured, accepted as having no effect here (``user``,
``metadata``, ``safety_identifier``, ``prompt_cache_key``, ``service_tier``: labels and hints), or
refused with a 400 naming it (``unsupported``). Pagoda's sampling extras of the chat route (``top_k``,
``seed``, ``stop``, ...) pass through ``extra_body``; any other field is a 400.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict

from pagoda.server.errors import APIError
from pagoda.server.protocol import Int
from pagoda.server.translation import Refusals, refuse, unknown_fields

# Fields of the chat route a Responses request may carry too (vLLM's extras, through extra_body)
CHAT_EXTRAS = ("top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "min_tokens", "repetition_penalty",
               "presence_penalty", "frequency_penalty", "logit_bias", "allowed_token_ids", "bad_words",
               "skip_special_tokens", "include_stop_str_in_output", "priority", "chat_template")


class ResponsesRequest(BaseModel):
    """``POST /v1/responses``: ``input`` (text, or a list of items) after ``instructions``, continuing
    ``previous_response_id``'s conversation when given."""

    model_config = ConfigDict(extra="allow")

    model: Optional[str] = None
    input: Union[str, list[dict[str, Any]], None] = None
    instructions: Optional[str] = None
    previous_response_id: Optional[str] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Union[str, dict[str, Any], None] = None
    parallel_tool_calls: Optional[bool] = None
    text: Optional[dict[str, Any]] = None
    max_output_tokens: Optional[Int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stream: bool = False
    store: Optional[bool] = None  # default: stored when the server keeps responses (--responses-store-size)
    background: bool = False
    metadata: Optional[dict[str, str]] = None
    # labels and hints: accepted, no effect on the output
    user: Optional[str] = None
    safety_identifier: Optional[str] = None
    prompt_cache_key: Optional[str] = None
    service_tier: Optional[str] = None
    stream_options: Optional[dict[str, Any]] = None  # include_obfuscation: these events carry no padding
    # refused unless they ask for nothing (see unsupported)
    truncation: Optional[str] = None
    reasoning: Optional[dict[str, Any]] = None
    include: Optional[list[str]] = None
    top_logprobs: Optional[Int] = None
    max_tool_calls: Optional[Int] = None

    def chat_extras(self) -> dict[str, Any]:
        """The chat route's sampling extras this request carries."""
        return {name: value for name, value in (self.model_extra or {}).items() if name in CHAT_EXTRAS}


_REFUSED: Refusals = {
    "truncation": (lambda v: v not in (None, "disabled"), "dropping input items to fit the context is not implemented",
                   "send 'disabled' (the default: a too long input is a 400)"),
    "reasoning": (lambda v: bool(v) and any(x is not None for x in v.values()),
                  "the model's reasoning effort and summaries cannot be set here (a reasoning model's reasoning is "
                  "returned as reasoning items when the server runs with --reasoning-parser)", "remove 'reasoning'"),
    "include": (bool, "no extra output data is available", "remove 'include'"),
    "top_logprobs": (lambda v: v is not None, "log probabilities are not returned by /v1/responses",
                     "use /v1/chat/completions with logprobs and top_logprobs"),
    "max_tool_calls": (lambda v: v is not None, "a limit on tool calls is not implemented",
                       "remove it (parallel_tool_calls=false allows one call per response)"),
    "conversation": (lambda v: v is not None, "server-side conversations are not implemented",
                     "continue a conversation with previous_response_id"),
    "prompt": (lambda v: v is not None, "reusable prompt templates are not available", "send input and instructions"),
    "context_management": (lambda v: v is not None, "context compaction is not implemented", "remove it"),
}


def check_fields(body: ResponsesRequest) -> None:
    """400 for a field this server cannot honour, and for a field it does not know."""
    unknown = unknown_fields(body, _REFUSED, CHAT_EXTRAS)
    if unknown:
        raise APIError(400, f"unknown field '{unknown[0]}' for /v1/responses; remove it (the fields of OpenAI's "
                            "Responses API, and Pagoda's sampling extras such as top_k and seed, are accepted)",
                       param=unknown[0], code="unknown_parameter")
    if body.stream and body.background:
        raise refuse("background", "streaming a background response is not implemented",
                     "send stream or background, not both (poll GET /v1/responses/{id} for a background one)")
    if body.service_tier not in (None, "auto", "default"):
        raise refuse("service_tier", f"this server has one service tier, not {body.service_tier!r}",
                     "send 'auto' or 'default', or remove it")
