"""The request series of /metrics (vLLM's names and meaning), counted by the API server, plus the engine
cores' series (:mod:`pagoda.server.metrics_engine`). Names carry ``--metrics-name-prefix`` (``pagoda``,
or ``vllm`` for vLLM's dashboards); request series are labelled ``model_name`` (the served name, or the
LoRA adapter a request named) and ``engine`` (the engine core that ran it). docs/observability.md has
the table.

:class:`~pagoda.server.request_observers.RequestObservers` calls the observation methods as outputs are
processed; ``/metrics`` renders, adding the other API servers' :meth:`ServerMetrics.state` when there
are several (each is counted once: in the process that served the request).
"""

from __future__ import annotations

import threading

from pagoda.engine.output_processor import RequestState
from pagoda.messages import StepStats
from pagoda.server.metric_family import CounterFamily, Family, HistogramFamily, Labels, escape, one_two_five
from pagoda.server.metrics_engine import engine_lines, kv_connector_lines, spec_decode_lines

# vLLM's buckets (seconds): request phases, time to first token, gaps between tokens
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
LABELS = ("model_name", "engine")
FINISH_REASONS = ("stop", "length", "abort")  # shown at 0 before the first request ("error" once one failed)
DEFAULT_MAX_MODEL_LEN = 1 << 20  # the token-count buckets' limit when the engine's is not given


class ServerMetrics:
    """Counters and histograms of the requests one API server served, and its view of the engine cores'
    gauges (thread-safe)."""

    def __init__(self, model_name: str, prefix: str = "pagoda", max_model_len: int = DEFAULT_MAX_MODEL_LEN) -> None:
        self.model_name, self.prefix, self.max_model_len = model_name, prefix, max_model_len
        self._lock = threading.Lock()
        self.snapshot = StepStats()  # the latest engine core gauges received
        self.engine_stats: dict[int, StepStats] = {}  # engine core -> its latest gauges (label engine)
        tokens = one_two_five(max_model_len)
        self.prompt_tokens = CounterFamily("prompt_tokens_total", "Prompt tokens of requests that started generating.",
                                           LABELS)
        self.generation_tokens = CounterFamily("generation_tokens_total", "Generated tokens.", LABELS)
        self.success = CounterFamily("request_success_total", "Finished sequences by finish reason.",
                                     (*LABELS, "finished_reason"))
        self.ttft = _seconds("time_to_first_token_seconds", "Arrival to first token.", TTFT_BUCKETS)
        self.itl = _seconds("inter_token_latency_seconds", "Between consecutive tokens of a request.", ITL_BUCKETS)
        self.request_tpot = _seconds("request_time_per_output_token_seconds",
                                     "Decode time over generated tokens less one, per request.", ITL_BUCKETS)
        self.e2e = _seconds("e2e_request_latency_seconds", "Arrival to finish.", REQUEST_LATENCY_BUCKETS)
        self.queue = _seconds("request_queue_time_seconds", "Waiting in the engine core before the first step.",
                              REQUEST_LATENCY_BUCKETS)
        self.prefill = _seconds("request_prefill_time_seconds", "First step to first token.", REQUEST_LATENCY_BUCKETS)
        self.decode = _seconds("request_decode_time_seconds", "First token to last token.", REQUEST_LATENCY_BUCKETS)
        self.inference = _seconds("request_inference_time_seconds", "First step to last token (prefill + decode).",
                                  REQUEST_LATENCY_BUCKETS)
        self.prompt_len = HistogramFamily("request_prompt_tokens", "Prompt tokens per request.", LABELS, tokens)
        self.generation_len = HistogramFamily("request_generation_tokens", "Generated tokens per request.", LABELS,
                                              tokens)
        self.max_generation_len = HistogramFamily("request_max_num_generation_tokens",
                                                  "Generated tokens of a request's longest sequence.", LABELS, tokens)
        self.params_n = HistogramFamily("request_params_n", "The n of each request.", LABELS, PARAMS_N_BUCKETS)
        self.params_max_tokens = HistogramFamily("request_params_max_tokens", "The max_tokens of each request.",
                                                 LABELS, tokens)

    # -- observations (RequestObservers) ----------------------------------------------------------------
    def first_token(self, labels: Labels, ttft: float, prompt_tokens: int) -> None:
        with self._lock:
            self.ttft.observe(labels, ttft)
            self.prompt_tokens.inc(labels, prompt_tokens)

    def tokens(self, labels: Labels, count: int, gap: float | None) -> None:
        """``count`` generated tokens; ``gap``: seconds since the request's previous tokens (None: none)."""
        with self._lock:
            self.generation_tokens.inc(labels, count)
            if gap is not None:
                self.itl.observe(labels, gap)

    def finished(self, labels: Labels, state: RequestState, reasons: list[str], now: float) -> None:
        """A request ended (finished, or aborted with ``reasons`` "abort" for its unfinished sequences)."""
        m = state.metrics
        lengths = [len(c.token_ids) for c in state.children]
        with self._lock:
            for reason in reasons:
                self.success.inc((*labels, reason))
            self.e2e.observe(labels, now - m.arrival_time)
            self.prompt_len.observe(labels, len(state.prompt_token_ids))
            self.generation_len.observe(labels, sum(lengths))
            self.max_generation_len.observe(labels, max(lengths))
            self.params_n.observe(labels, state.num_returned)
            max_tokens = state.children[0].params.max_tokens
            if max_tokens is not None:
                self.params_max_tokens.observe(labels, max_tokens)
            self._phases(labels, state, max(lengths))

    def _phases(self, labels: Labels, state: RequestState, longest: int) -> None:
        """Queue, prefill, decode and inference times: those whose two ends are known."""
        m = state.metrics
        scheduled, first, last = m.first_scheduled_time, m.first_token_time, m.last_token_time
        if scheduled is not None and m.queued_time is not None:
            self.queue.observe(labels, max(0.0, scheduled - m.queued_time))
        if scheduled is not None and first is not None:
            self.prefill.observe(labels, max(0.0, first - scheduled))
            self.inference.observe(labels, max(0.0, last - scheduled))
        if first is not None:
            self.decode.observe(labels, last - first)
            if longest > 1:
                self.request_tpot.observe(labels, (last - first) / (longest - 1))

    def failed(self, labels: Labels, num_sequences: int) -> None:
        """A request the engine refused, or whose engine core died (finished_reason "error")."""
        with self._lock:
            self.success.inc((*labels, "error"), num_sequences)

    # -- exposition --------------------------------------------------------------------------------------
    def _families(self) -> list[Family]:
        return [self.prompt_tokens, self.generation_tokens, self.success, self.ttft, self.itl, self.request_tpot,
                self.e2e, self.queue, self.prefill, self.decode, self.inference, self.prompt_len,
                self.generation_len, self.max_generation_len, self.params_n, self.params_max_tokens]

    def state(self) -> dict:
        """This process's counters and histograms as plain data (what other API servers merge)."""
        with self._lock:
            return {family.name: family.state() for family in self._families()}

    def render(self, others: list[dict] = ()) -> str:
        """The Prometheus text exposition (version 0.0.4): this process's numbers plus ``others``
        (the :meth:`state` of the other API server processes)."""
        if not others:
            with self._lock:
                return "\n".join(self._lines()) + "\n"
        total = ServerMetrics(self.model_name, self.prefix, self.max_model_len)
        total.snapshot, total.engine_stats = self.snapshot, self.engine_stats
        for state in (self.state(), *others):
            for family in total._families():
                family.add(state.get(family.name, []))
        return "\n".join(total._lines()) + "\n"

    def _lines(self) -> list[str]:
        label = f'model_name="{escape(self.model_name)}"'
        engines = self.engine_stats or {0: self.snapshot}
        seed = [(self.model_name, str(d)) for d in sorted(engines)]
        out = engine_lines(self.prefix, label, engines)
        out += spec_decode_lines(self.prefix, self.snapshot, label)
        out += kv_connector_lines(self.prefix, self.snapshot, label)
        for family in self._families():
            if family is self.success:
                out += family.lines(self.prefix, [(*labels, r) for labels in seed for r in FINISH_REASONS])
            else:
                out += family.lines(self.prefix, seed)
            if family is self.itl:  # vLLM's older name of the same series (deprecated there)
                out += family.lines(self.prefix, seed, name="time_per_output_token_seconds")
        return out


def _seconds(name: str, text: str, buckets: tuple[float, ...]) -> HistogramFamily:
    return HistogramFamily(name, text, LABELS, buckets)
