"""What ``LLM.generate`` and the server return (vLLM's names)."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.messages import StepStats  # noqa: F401 - part of the public outputs


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None  # 1 = most likely; None when not computed
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """One generated sequence. For streamed requests (``stream=True``) each output carries only
    what is new since the previous one: ``text``, ``token_ids`` and ``logprobs`` are deltas."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: list[dict[int, Logprob]] | None = None  # one dict per generated token, when asked for
    finish_reason: str | None = None  # "stop" | "length" | "abort"
    stop_reason: int | str | None = None  # the stop string or stop token id that ended it

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """A request's times, ``time.monotonic()`` seconds (one clock for every process of a host): arrival and
    token times as the front end saw them, ``queued_time`` and ``first_scheduled_time`` as the engine core
    did (when it took the request, when its first step was launched; the earliest of its sequences)."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    queued_time: float | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    metrics: RequestMetrics | None = None
    num_cached_tokens: int = 0

    def __repr__(self) -> str:
        texts = [o.text for o in self.outputs]
        return f"RequestOutput(request_id={self.request_id!r}, outputs={texts!r}, finished={self.finished})"
