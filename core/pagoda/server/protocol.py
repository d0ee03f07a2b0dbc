"""Pydantic request models of the OpenAI-compatible API (the response models are in ``responses.py``).

Unknown fields are kept aside (``model_extra``): most are ignored, as OpenAI clients send optional
fields Pagoda does not implement, but those that ask for a guarantee it cannot give
(``functions``, ``suffix``, ...) are answered with 400 (``pagoda.server.unsupported``).
Sampling fields beyond OpenAI's (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``,
``min_tokens``, ...) follow vLLM's names.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field

from pagoda.tools.plan import template_arguments

# Every integer crosses to the engine core as msgpack: a 64-bit signed range, checked here (400)
# rather than failing to serialize (found by tests/server/test_fuzz.py: priority -2**63 - 1 was a 500).
Int = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # vLLM: usage in every chunk (not implemented: a 400)


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
    logit_bias: dict[str, float] | None = None  # token id (a JSON key, so a string) -> bias in [-100, 100]
    allowed_token_ids: list[Int] | None = None  # vLLM: only these tokens may be sampled
    bad_words: list[str] | None = None  # vLLM: words that may not be generated
    use_beam_search: bool = False  # vLLM: beam search with n beams, returning the n best sequences
    length_penalty: float = 1.0  # beam search: a sequence scores sum(logprobs) / length ** length_penalty
    early_stopping: Union[bool, Literal["never"]] = False  # beam search: HF transformers' meaning

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
    best_of: Int | None = None  # sample best_of sequences, return the n with the highest cumulative logprob


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"] = "text"
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="ignore")

    url: str  # data:image/...;base64,..., file:///... (--allowed-local-media-path), http(s)://... (--allow-remote-media)
    detail: str | None = None  # OpenAI's resolution hint; the model's image processor decides the resolution


class ImagePart(BaseModel):
    """An image of a vision-language model's prompt (docs/multimodal.md)."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["image_url"]
    image_url: Union[ImageURL, str]

    @property
    def url(self) -> str:
        return self.image_url if isinstance(self.image_url, str) else self.image_url.url


class FunctionCall(BaseModel):
    """A call an earlier assistant turn made: ``arguments`` is JSON text, as OpenAI sends it."""

    model_config = ConfigDict(extra="allow")

    name: str
    arguments: Union[str, dict[str, Any]] = "{}"


class MessageToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall

    def as_template_dict(self) -> dict:
        """As chat templates expect it: ``arguments`` a dict when it is a JSON object (templates
        apply ``tojson`` to it; a JSON string would be encoded twice)."""
        arguments = template_arguments(self.function.arguments)
        call = {"type": "function", "function": {"name": self.function.name, "arguments": arguments}}
        return call if self.id is None else {"id": self.id, **call}


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[Union[TextPart, ImagePart]], None] = None
    name: str | None = None
    tool_calls: list[MessageToolCall] | None = None  # assistant turns that called tools
    tool_call_id: str | None = None  # tool results: the call they answer

    @property
    def has_images(self) -> bool:
        return isinstance(self.content, list) and any(isinstance(part, ImagePart) for part in self.content)

    def as_template_dict(self) -> dict:
        """The message as a chat template sees it: text parts joined into one string; a message with images
        keeps its parts (``pagoda.multimodal.chat.split_images`` turns them into the template's image parts)."""
        content = self.content
        if self.has_images:
            content = [{"type": "text", "text": part.text} if isinstance(part, TextPart)
                       else {"type": "image_url", "image_url": {"url": part.url}} for part in content]
        elif isinstance(content, list):
            content = "".join(part.text for part in content)
        message = {"role": self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.as_template_dict() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of the arguments object
    strict: bool | None = None


class ChatTool(BaseModel):
    """One entry of ``tools``: a function the model may call."""

    type: Literal["function"] = "function"
    function: FunctionDefinition

    def as_template_dict(self) -> dict:
        return {"type": "function", "function": self.function.model_dump(exclude_none=True)}


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice: {"type": "function", "function": {"name": ...}}``: call exactly this function."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Union[Literal["none", "auto", "required"], NamedToolChoice]


class ChatCompletionRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Int | None = None
    max_completion_tokens: Int | None = None
    logprobs: bool = False
    top_logprobs: Int | None = None
    add_generation_prompt: bool = True
    chat_template: str | None = None
    tools: list[ChatTool] | None = None
    tool_choice: ToolChoice | None = None  # default: "auto" with tools, "none" without
    parallel_tool_calls: bool = True


class TokenizeRequest(BaseModel):
    """``POST /tokenize``: a prompt, or chat messages rendered with the chat template."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False  # also answer each token's string (vLLM)


class DetokenizeRequest(BaseModel):
    """``POST /detokenize``."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]
