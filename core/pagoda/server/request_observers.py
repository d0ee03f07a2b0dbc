"""Where an API server's requests are observed: /metrics (:class:`ServerMetrics`), traces
(:class:`~pagoda.server.tracing.RequestTracer`) and request logs (:class:`~pagoda.server.request_log.RequestLog`).

The output processor tells :class:`RequestObservers` of each request's tokens and end
(:class:`~pagoda.engine.output_processor.OutputListener`); :class:`~pagoda.server.async_engine.AsyncEngine`
tells it of requests added, aborted and failed, and of the engine core each batch of outputs came from.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pagoda.engine.output_processor import RequestState
from pagoda.sampling_params import SamplingParams
from pagoda.server.metrics import ServerMetrics
from pagoda.server.request_log import RequestLog
from pagoda.server.request_record import RequestRecord
from pagoda.server.tracing import IncomingRequest, RequestTracer, incoming_request

logger = logging.getLogger("pagoda.server")


@dataclass
class Watched:
    """What the observers keep of a request until it ends."""

    model: str  # label model_name: the served name, or the LoRA adapter it named
    params: SamplingParams
    engine: int | None = None  # the engine core it was routed to
    incoming: IncomingRequest | None = None  # the HTTP request it came with (traces only)


class RequestObservers:
    """Feeds the metrics, and the tracer and request log when they are on."""

    def __init__(self, metrics: ServerMetrics, tracer: RequestTracer | None = None,
                 request_log: RequestLog | None = None, engine_of=lambda request_id: 0) -> None:
        self.metrics, self.tracer, self.request_log = metrics, tracer, request_log
        self.engine_of = engine_of  # request id -> the engine core it was routed to (before any output)
        self.batch_engine = 0  # the engine core of the outputs being processed
        self._watched: dict[str, Watched] = {}

    def added(self, request_id: str, prompt: str | None, prompt_token_ids: list[int], params: SamplingParams,
              adapter: str | None = None) -> None:
        """A request goes to the engine (``adapter``: the LoRA adapter it runs with)."""
        watched = Watched(adapter or self.metrics.model_name, params)
        if self.tracer is not None:
            watched.incoming = incoming_request()
        self._watched[request_id] = watched
        if self.request_log is not None:
            self.request_log.received(request_id, watched.model, prompt, prompt_token_ids, params)

    def routed(self, request_id: str) -> None:
        """The request reached its engine core: note which (its series are labelled with it)."""
        watched = self._watched.get(request_id)
        if watched is not None and watched.engine is None:
            watched.engine = self.engine_of(request_id)

    # -- the output processor's listener -----------------------------------------------------------------
    def on_tokens(self, state: RequestState, num_tokens: int, previous: float | None, now: float) -> None:
        watched = self._watched.get(state.request_id)
        if watched is None:
            return
        if watched.engine is None:  # its tokens came before AsyncEngine noted the routing
            watched.engine = self.batch_engine
        labels = (watched.model, str(watched.engine))
        if previous is None:
            self.metrics.first_token(labels, now - state.metrics.arrival_time, len(state.prompt_token_ids))
        self.metrics.tokens(labels, num_tokens, now - previous if previous is not None and previous != now else None)

    def on_finished(self, state: RequestState) -> None:
        self._ended(state, [c.finish_reason or "abort" for c in state.children], state.metrics.finished_time)

    # -- the ends AsyncEngine sees ------------------------------------------------------------------------
    def aborted(self, state: RequestState) -> None:
        """Stopped before it finished (client gone, timeout): its unfinished sequences count as "abort"."""
        self._ended(state, [c.finish_reason or "abort" for c in state.children], time.monotonic())

    def failed(self, state: RequestState) -> None:
        """Refused by the engine core, or its core died: every sequence counts as "error"."""
        watched = self._watched.pop(state.request_id, None)
        if watched is None:
            return
        self.metrics.failed(self._labels(state.request_id, watched), len(state.children))
        self._report(state, watched, ["error"] * len(state.children), time.monotonic())

    def _ended(self, state: RequestState, reasons: list[str], now: float | None) -> None:
        watched = self._watched.pop(state.request_id, None)
        if watched is None:
            return
        now = time.monotonic() if now is None else now
        self.metrics.finished(self._labels(state.request_id, watched), state, reasons, now)
        self._report(state, watched, reasons, now)

    def _labels(self, request_id: str, watched: Watched) -> tuple[str, str]:
        if watched.engine is None:
            watched.engine = self.engine_of(request_id)
        return watched.model, str(watched.engine)

    def _report(self, state: RequestState, watched: Watched, reasons: list[str], now: float) -> None:
        """The span and the log line of a request that ended (when traces or request logs are on)."""
        if self.tracer is None and self.request_log is None:
            return
        incoming = watched.incoming
        record = RequestRecord(state.request_id, watched.model, watched.engine or 0, watched.params,
                               len(state.prompt_token_ids), sum(len(c.token_ids) for c in state.children), reasons,
                               state.metrics, now, incoming.operation if incoming else "text_completion",
                               incoming.trace_headers if incoming else None)
        if self.tracer is not None:
            try:
                self.tracer.record(record)
            except Exception:  # noqa: BLE001 - a tracing fault never fails serving
                logger.exception("Could not record the trace span of request %s", state.request_id)
        if self.request_log is not None:
            self.request_log.finished(record)

    def close(self) -> None:
        if self.tracer is not None:
            self.tracer.shutdown()
