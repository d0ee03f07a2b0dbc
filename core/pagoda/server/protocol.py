"""Pydantic request models of the OpenAI-compatible API (the response models are in ``responses.py``).

Unknown fields are kept aside (``model_extra``): most are ignored, as OpenAI clients send optional
fields Pagoda does not implement, but those that ask for a guarantee (``response_format``,
``tools``, ...) are answered with 400 (``pagoda.server.unsupported``).
Sampling fields beyond OpenAI's (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``,
``min_tokens``, ...) follow vLLM's names.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

# Every integer crosses to the engine core as msgpack: a 64-bit signed range, checked here (400)
# rather than failing to serialize (found by tests/server/test_fuzz.py: priority -2**63 - 1 was a 500).
Int = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class StreamOptions(BaseModel):
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    n: Int = 1
    temperature: float | None = None
    top_p: float | None = None
    top_k: Int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    seed: Int | None = None
    stop: Union[str, list[str], None] = None
    stop_token_ids: list[Int] | None = None
    ignore_eos: bool = False
    min_tokens: Int = 0
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    priority: Int = 0  # with --scheduler priority: lower runs first (vLLM's extension)

    @property
    def include_usage_in_stream(self) -> bool:
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)


PromptInput = Union[str, list[str], list[Int], list[list[Int]]]


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``."""

    prompt: PromptInput
    max_tokens: Int | None = 16
    logprobs: Int | None = None
    echo: bool = False


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"] = "text"
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[TextPart], None] = None
    name: str | None = None

    def as_template_dict(self) -> dict:
        """The message as a chat template sees it (text parts joined into one string)."""
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        message = {"role": self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        return message


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Int | None = None
    max_completion_tokens: Int | None = None
    logprobs: bool = False
    top_logprobs: Int | None = None
    add_generation_prompt: bool = True
    chat_template: str | None = None


class TokenizeRequest(BaseModel):
    """``POST /tokenize``: a prompt, or chat messages rendered with the chat template."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True


class DetokenizeRequest(BaseModel):
    """``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]
