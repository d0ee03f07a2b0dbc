"""What every route needs: the async engine, the tokenizer, the served names; plus shared helpers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pagoda.sampling.token_controls import resolve_token_controls
from pagoda.errors import RequestError
from pagoda.sampling_params import SamplingParams
from pagoda.server.async_engine import AsyncEngine, EngineDeadError, RequestTimeout
from pagoda.server.errors import APIError, EngineUnavailable, bad_request
from pagoda.server.guided_fields import guided_params
from pagoda.server.protocol import SamplingFields
from pagoda.server.unsupported import check_unsupported

if TYPE_CHECKING:
    from pagoda.lora_request import LoRARequest
    from pagoda.server.adapters import ServedAdapters
    from pagoda.server.images import ServerImages


@dataclass
class ServerState:
    """Shared, read-mostly state of one server."""

    engine: AsyncEngine
    served_model_names: list[str]
    api_key: str | None = None
    max_n: int = 16  # most choices one request may ask for (--max-n-per-request)
    tool_parser: type | None = None  # --tool-call-parser: a ToolParser subclass (docs/tools.md)
    reasoning_parser: type | None = None  # --reasoning-parser: a ReasoningParser subclass
    created: int = field(default_factory=lambda: int(time.time()))
    adapters: "ServedAdapters | None" = None  # LoRA adapters requests may name in ``model`` (docs/lora.md)
    images: "ServerImages | None" = None  # image content parts of chat requests (docs/multimodal.md)

    @property
    def model_name(self) -> str:
        return self.served_model_names[0]

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    async def encode(self, text: str, add_special_tokens: bool = True, max_length: int | None = None) -> list[int]:
        """The token ids of ``text`` (at most ``max_length``), tokenized off the event loop
        (pagoda.server.tokenize_pool)."""
        if self.engine.encoder is None:
            raise APIError(400, "text prompts need the model's tokenizer, and this server runs with "
                                "--skip-tokenizer-init: send token ids, or restart it without that flag", param="prompt")
        return await self.engine.encoder.encode(text, add_special_tokens, max_length)

    async def encode_pairs(self, pairs: list[tuple[str, str]], max_length: int | None) -> list[tuple[list[int], int | None]]:
        """A cross-encoder's ids of each text pair and where its second text starts, off the event loop (the
        caller checked that the server has a tokenizer)."""
        return await self.engine.encoder.encode_pairs(pairs, max_length)

    async def encode_texts(self, items: list, max_length: int | None = None) -> list[list[int]]:
        """The ids of each item: text tokenized (together, off the event loop), token ids as given; both at most
        ``max_length``."""
        texts = iter(await asyncio.gather(*(self.encode(i, max_length=max_length) for i in items if isinstance(i, str))))
        return [next(texts) if isinstance(i, str) else list(i)[:max_length] for i in items]

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def check_model(self, requested: str | None) -> str:
        """The model name to answer with; 404 when the request names another model (or adapter)."""
        if requested is None or requested in self.served_model_names:
            return requested or self.model_name
        if self.adapters is not None and requested in self.adapters.by_name:
            return requested
        adapters = sorted(self.adapters.by_name) if self.adapters is not None else []
        also = f", and LoRA adapters {', '.join(map(repr, adapters))}" if adapters else ""
        raise APIError(404, f"The model '{requested}' does not exist; this server serves "
                            f"{', '.join(repr(n) for n in self.served_model_names)}{also}", param="model",
                       code="model_not_found")

    async def resolve_model(self, requested: str | None) -> "tuple[str, LoRARequest | None]":
        """The model name to answer with and the LoRA adapter it names (None: the base model); 404 if unknown."""
        if requested is None or requested in self.served_model_names or self.adapters is None:
            return self.check_model(requested), None
        lora = await self.adapters.resolve(requested)
        return self.check_model(requested), lora

    def check_available(self) -> None:
        reason = self.engine.unavailable_reason()
        if reason is not None:
            raise EngineUnavailable(reason)

    def check_limits(self, params: SamplingParams, prompt_lens: list[int]) -> None:
        """400 for work past the server's limits: too many choices, or prompt + max_tokens past the context."""
        if params.n > self.max_n:
            raise APIError(400, f"n={params.n} asks for more choices than this server allows per request ({self.max_n}; "
                                f"the operator can raise it with --max-n-per-request)", param="n")
        if params.guided_decoding is not None and self.tokenizer is None:
            raise APIError(400, "structured output (response_format, guided_*) needs the model's tokenizer, and this "
                                "server runs with --skip-tokenizer-init; restart it without that flag",
                           param="response_format")
        try:  # bad words tokenize, and every token id is in the vocabulary (the engine does it again)
            resolve_token_controls(params, self.tokenizer, self.engine.info.vocab_size)
        except RequestError as exc:
            raise bad_request(exc) from exc
        if params.max_tokens is None:
            return
        for length in prompt_lens:
            if length + params.max_tokens > self.max_model_len:
                raise APIError(400, f"This model's maximum context length is {self.max_model_len} tokens, but the request "
                                    f"asks for {length + params.max_tokens} ({length} in the prompt, {params.max_tokens} "
                                    f"to generate): set max_tokens to at most {self.max_model_len - length} or shorten "
                                    f"the prompt", param="max_tokens")

    def validate_prompt(self, token_ids: list[int]) -> None:
        try:
            self.engine.validate_prompt(token_ids)
        except RequestError as exc:
            raise APIError(400, str(exc), param="prompt" if "prompt" in str(exc) else None) from exc


def sampling_params(req: SamplingFields, max_tokens: int | None, logprobs: int | None) -> SamplingParams:
    """Build SamplingParams from request fields; a bad value, or a field asking for what Pagoda
    cannot do yet, is a 400 naming the field."""
    check_unsupported(req.model_extra)
    if req.stream_options is not None and req.stream_options.continuous_usage_stats:
        raise APIError(400, "stream_options.continuous_usage_stats (usage in every chunk) is not implemented; send "
                            "include_usage for the usage in a last chunk, and remove continuous_usage_stats",
                       param="stream_options", code="unsupported_parameter")
    values = {
        "n": req.n, "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
        "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty, "seed": req.seed, "stop": req.stop,
        "stop_token_ids": req.stop_token_ids, "ignore_eos": req.ignore_eos, "min_tokens": req.min_tokens,
        "skip_special_tokens": req.skip_special_tokens, "include_stop_str_in_output": req.include_stop_str_in_output,
        "max_tokens": max_tokens, "logprobs": logprobs, "guided_decoding": guided_params(req.model_extra),
        "logit_bias": req.logit_bias, "allowed_token_ids": req.allowed_token_ids, "bad_words": req.bad_words,
        "best_of": getattr(req, "best_of", None),
    }
    given = {k: v for k, v in values.items() if v is not None or k == "max_tokens"}
    try:
        return SamplingParams(**given)
    except (RequestError, ValueError, TypeError) as exc:
        raise bad_request(exc) from exc


def engine_error(exc: BaseException) -> APIError:
    """Map an exception raised while generating to an API error."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, EngineDeadError):
        return EngineUnavailable(str(exc))
    if isinstance(exc, RequestTimeout):
        return APIError(504, str(exc), code="request_timeout")
    if isinstance(exc, ValueError):
        return bad_request(exc)
    return APIError(500, f"internal error: {type(exc).__name__}: {exc}")


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}
