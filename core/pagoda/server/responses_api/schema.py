"""The Responses API's answers as pydantic models: what /openapi.json publishes for ``/v1/responses``
(and what the fuzz test validates each answer and each streamed event against)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

ItemStatus = Literal["in_progress", "completed", "incomplete"]


class OutputText(BaseModel):
    type: Literal["output_text"]
    text: str
    annotations: list[Any]
    logprobs: list[Any]


class MessageItem(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    status: ItemStatus
    content: list[OutputText]


class ReasoningText(BaseModel):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(BaseModel):
    id: str
    type: Literal["reasoning"]
    summary: list[Any]
    content: list[ReasoningText]
    status: ItemStatus


class FunctionCallItem(BaseModel):
    id: str
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str  # JSON text
    status: ItemStatus


OutputItem = Annotated[Union[MessageItem, ReasoningItem, FunctionCallItem], Field(discriminator="type")]


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: dict[str, int]  # cached_tokens: prompt tokens read from the prefix cache
    output_tokens: int
    output_tokens_details: dict[str, int]  # reasoning_tokens
    total_tokens: int


class ResponseObject(BaseModel):
    """A response: its settings, status, output items and (once finished) usage."""

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["in_progress", "completed", "incomplete", "cancelled", "failed"]
    completed_at: Optional[int]
    background: bool
    error: Optional[dict[str, Any]]
    incomplete_details: Optional[dict[str, Any]]
    instructions: Optional[str]
    max_output_tokens: Optional[int]
    max_tool_calls: Optional[int]
    metadata: dict[str, Any]
    model: str
    output: list[OutputItem]
    parallel_tool_calls: bool
    previous_response_id: Optional[str]
    reasoning: dict[str, Any]
    service_tier: str
    store: bool
    temperature: float
    text: dict[str, Any]
    tool_choice: Union[str, dict[str, Any]]
    tools: list[dict[str, Any]]
    top_p: float
    truncation: str
    usage: Optional[ResponseUsage]
    user: Optional[str]
    safety_identifier: Optional[str]
    prompt_cache_key: Optional[str]


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class ResponseStreamEvent(BaseModel):
    """One event of a response stream (``response.created``, ``response.output_text.delta``, ...,
    ``error``): its ``type``, ``sequence_number`` and the fields of that type."""

    model_config = ConfigDict(extra="allow")

    type: str
    sequence_number: int
