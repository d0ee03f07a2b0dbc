"""Pydantic response models of the OpenAI-compatible API: what /openapi.json publishes and what the
JSON routes' answers are validated against (streams are written as plain dicts, see ``openapi.py``).

Every field is required (a ``None`` value is sent as ``null``), except ``usage`` of stream chunks,
which only the last chunk of a stream with ``stream_options.include_usage`` carries.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel

FinishReason = Literal["stop", "length", "abort", "tool_calls"]


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None
    code: Union[str, int, None]


class ErrorResponse(BaseModel):
    """OpenAI's error body, for every error status (and in-band on a stream)."""

    error: ErrorInfo


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    """The legacy completions ``logprobs`` object, one entry per generated token (with ``echo``,
    first one per prompt token: the first prompt token has no logprob, so null)."""

    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: FinishReason | None
    logprobs: CompletionLogprobs | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage


class CompletionChunk(BaseModel):
    """One event of a completions stream (the usage chunk has no choices)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob]


class FunctionCallOut(BaseModel):
    name: str
    arguments: str  # JSON text of the arguments object


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"]
    function: FunctionCallOut


class AssistantMessage(BaseModel):
    """``content`` is null when the reply is only tool calls; ``reasoning_content`` is set with
    ``--reasoning-parser``, ``tool_calls`` when the model called tools (docs/tools.md)."""

    role: Literal["assistant"]
    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: FinishReason | None
    logprobs: ChatLogprobs | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class FunctionDelta(BaseModel):
    name: str | None = None  # in the first delta of a call
    arguments: str | None = None  # "" in the first delta, then fragments of the JSON text


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None  # in the first delta of a call
    type: Literal["function"] | None = None
    function: FunctionDelta


class ChatDelta(BaseModel):
    """What a chat chunk adds: the role (first chunk of a choice), then text, reasoning or tool calls."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class ChatCompletionChunk(BaseModel):
    """One event of a chat completions stream (the usage chunk has no choices)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    max_model_len: int
    root: str | None = None  # a LoRA adapter's folder (the base model: its served name)
    parent: str | None = None  # a LoRA adapter's base model


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class TokenizeResponse(BaseModel):
    tokens: list[int]
    count: int
    max_model_len: int
    token_strs: list[str] | None  # with return_token_strs


class DetokenizeResponse(BaseModel):
    prompt: str


class HealthResponse(BaseModel):
    status: Literal["ok"]


class VersionResponse(BaseModel):
    version: str
