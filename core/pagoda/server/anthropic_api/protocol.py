"""The requests of Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``).

As Anthropic's own API, an unknown field is a 400 (``NAME: Extra inputs are not permitted``); a known
field this server cannot honour is a 400 naming it (``thinking`` enabled, server tools, MCP servers, ...);
``metadata``, ``service_tier``, ``inference_geo`` and ``cache_control`` are accepted with no effect
(prefix caching reuses a repeated prompt prefix by itself).
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from pagoda.server.errors import APIError
from pagoda.server.protocol import Int
from pagoda.server.translation import Refusals, refuse, unknown_fields


class CountTokensRequest(BaseModel):
    """``POST /v1/messages/count_tokens``: the prompt of a Messages request, counted."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    system: Union[str, list[dict[str, Any]], None] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[dict[str, Any]] = None
    thinking: Optional[dict[str, Any]] = None
    output_config: Optional[dict[str, Any]] = None
    cache_control: Optional[dict[str, Any]] = None  # prompt caching: prefix caching is automatic here
    speed: Optional[str] = None


class MessagesRequest(CountTokensRequest):
    """``POST /v1/messages``."""

    max_tokens: Int
    stop_sequences: Optional[list[str]] = None
    stream: bool = False
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[Int] = None
    metadata: Optional[dict[str, Any]] = None
    service_tier: Optional[str] = None
    inference_geo: Optional[str] = None


_REFUSED: Refusals = {
    "thinking": (lambda v: isinstance(v, dict) and v.get("type") not in (None, "disabled"),
                 "extended thinking cannot be switched on or budgeted here (a reasoning model's thinking is returned "
                 "as thinking blocks when the server runs with --reasoning-parser)", "send {'type': 'disabled'}"),
    "speed": (lambda v: v not in (None, "standard"), "this server has one speed", "remove it"),
    "container": (lambda v: v is not None, "code execution containers are not available", "remove it"),
    "mcp_servers": (bool, "MCP servers are not available", "call the tools yourself through tools"),
    "context_management": (lambda v: v is not None, "context editing is not implemented", "remove it"),
}


def check_fields(body: CountTokensRequest) -> None:
    """400 for a field this server cannot honour, and (Anthropic's rule) for an unknown one."""
    unknown = unknown_fields(body, _REFUSED)
    if unknown:
        raise APIError(400, f"{unknown[0]}: Extra inputs are not permitted", param=unknown[0])
    effort = (body.output_config or {}).get("effort")
    if effort is not None:
        raise refuse("output_config.effort", "the model's effort cannot be set", "remove output_config.effort")
