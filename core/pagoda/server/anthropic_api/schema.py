"""The Messages API's answers as pydantic models: what /openapi.json publishes for ``/v1/messages``
(errors in Anthropic's shape)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field


class TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"]
    thinking: str
    signature: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = Annotated[Union[TextBlock, ThinkingBlock, ToolUseBlock], Field(discriminator="type")]


class MessageUsage(BaseModel):
    input_tokens: int  # prompt tokens not read from the prefix cache
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


class MessageObject(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentBlock]
    stop_reason: Optional[Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]]
    stop_sequence: Optional[str]
    usage: MessageUsage


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str


class AnthropicError(BaseModel):
    """Anthropic's error body, for every error status (and as the ``error`` event of a stream)."""

    type: Literal["error"]
    error: AnthropicErrorDetail


class MessageStreamEvent(BaseModel):
    """One event of a message stream (``message_start``, ``content_block_delta``, ..., ``error``)."""

    model_config = ConfigDict(extra="allow")

    type: str


ANTHROPIC_ERRORS: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": AnthropicError, "description": "400 invalid request (the message names the field), 401 missing "
                                                    "or wrong API key, 404 unknown model, 413 body too large"},
    "5XX": {"model": AnthropicError, "description": "503 the engine failed or the server is shutting down, "
                                                    "504 the request ran past --request-timeout"},
}
