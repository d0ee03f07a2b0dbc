"""What the traces and request logs say about one finished request (built once, when it ends)."""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.outputs import RequestMetrics
from pagoda.sampling_params import SamplingParams


@dataclass
class RequestRecord:
    """One engine request: its labels, sizes, finish reasons and times (``time.monotonic()`` seconds;
    None where the request never got there)."""

    request_id: str
    model: str  # the served model name, or the LoRA adapter the request named
    engine: int  # the engine core that ran it
    params: SamplingParams
    prompt_tokens: int
    output_tokens: int
    finish_reasons: list[str]  # per sequence: stop, length, abort or error
    times: RequestMetrics
    finished_time: float
    operation: str = "text_completion"  # the GenAI operation: chat or text_completion (from the HTTP route)
    trace_headers: dict[str, str] | None = None  # the incoming W3C trace context (traceparent, tracestate)

    def since_arrival(self, end: float | None) -> float | None:
        return None if end is None else end - self.times.arrival_time

    @property
    def queue_time(self) -> float | None:
        t = self.times
        if t.first_scheduled_time is None or t.queued_time is None:
            return None
        return max(0.0, t.first_scheduled_time - t.queued_time)

    def since_scheduled(self, end: float | None) -> float | None:
        scheduled = self.times.first_scheduled_time
        return None if scheduled is None or end is None else max(0.0, end - scheduled)

    @property
    def decode_time(self) -> float | None:
        t = self.times
        return None if t.first_token_time is None else t.last_token_time - t.first_token_time

    def latencies(self) -> dict[str, float]:
        """The request's phases in seconds (those it reached), under the names of vLLM's span attributes."""
        t = self.times
        values = {"time_to_first_token": self.since_arrival(t.first_token_time), "time_in_queue": self.queue_time,
                  "e2e": self.finished_time - t.arrival_time,
                  "time_in_model_prefill": self.since_scheduled(t.first_token_time),
                  "time_in_model_decode": self.decode_time,
                  "time_in_model_inference": self.since_scheduled(t.last_token_time)}
        return {name: value for name, value in values.items() if value is not None}
