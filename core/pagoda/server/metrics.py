"""Prometheus text-format metrics, written by hand (a few counters, gauges and histograms).

The engine thread calls :meth:`ServerMetrics.observe_outputs` after each step; ``/metrics`` renders.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

from pagoda.outputs import RequestOutput, StepStats

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
ENGINE_GAUGES = (  # (name, kind, help, StepStats field): one line per engine core
    ("pagoda:num_requests_running", "gauge", "Requests in the running batch.", "num_running"),
    ("pagoda:num_requests_waiting", "gauge", "Requests waiting to be scheduled.", "num_waiting"),
    ("pagoda:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).", "kv_cache_usage"),
    ("pagoda:prefix_cache_hit_rate", "gauge", "Prefix cache hit rate over all lookups (0-1).", "prefix_cache_hit_rate"),
    ("pagoda:num_preemptions_total", "counter", "Requests preempted (recomputed later).", "num_preemptions"),
)
E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0)


@dataclass
class Histogram:
    """Cumulative-bucket histogram (Prometheus ``_bucket``/``_sum``/``_count``)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def render(self, name: str, labels: str) -> list[str]:
        lines, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines

    def add(self, counts: list[int], total: float, count: int) -> None:
        """Add another histogram's state (same buckets)."""
        self.counts = [a + b for a, b in zip(self.counts, counts)]
        self.total += total
        self.count += count


class ServerMetrics:
    """Counters, gauges and histograms of one server (thread-safe)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._lock = threading.Lock()
        self.snapshot = StepStats()  # published by the engine thread after each loop iteration
        self.engine_stats: dict[int, StepStats] = {}  # engine core -> its latest gauges (label engine)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self._last_token_time: dict[str, float] = {}

    def on_added(self, num_prompt_tokens: int) -> None:
        with self._lock:
            self.prompt_tokens += num_prompt_tokens

    def on_aborted(self, request_id: str, num_sequences: int) -> None:
        with self._lock:
            self.finished["abort"] += num_sequences
            self._last_token_time.pop(request_id, None)

    def observe_outputs(self, outputs: list[RequestOutput]) -> None:
        """Record the (delta) outputs of one step."""
        with self._lock:
            for out in outputs:
                self._observe(out)

    def _observe(self, out: RequestOutput) -> None:
        new_tokens = sum(len(c.token_ids) for c in out.outputs)
        self.generation_tokens += new_tokens
        m = out.metrics
        if m is not None and new_tokens and m.last_token_time is not None:
            previous = self._last_token_time.get(out.request_id)
            if previous is None and m.first_token_time is not None:
                self.ttft.observe(m.first_token_time - m.arrival_time)
            elif previous is not None:
                self.itl.observe(m.last_token_time - previous)
            self._last_token_time[out.request_id] = m.last_token_time
        if out.finished:
            self._last_token_time.pop(out.request_id, None)
            for c in out.outputs:
                self.finished[c.finish_reason or "abort"] = self.finished.get(c.finish_reason or "abort", 0) + 1
            if m is not None and m.finished_time is not None:
                self.e2e.observe(m.finished_time - m.arrival_time)

    def state(self) -> dict:
        """This process's counters and histograms as plain data (what other API servers merge)."""
        with self._lock:
            return {"prompt_tokens": self.prompt_tokens, "generation_tokens": self.generation_tokens,
                    "finished": dict(self.finished),
                    **{name: [h.counts, h.total, h.count] for name, h in self._histograms().items()}}

    def render(self, others: list[dict] = ()) -> str:
        """The Prometheus text exposition (version 0.0.4): this process's numbers plus ``others``
        (the :meth:`state` of the other API server processes)."""
        if not others:
            with self._lock:
                return "\n".join(self._lines()) + "\n"
        total = ServerMetrics(self.model_name)
        total.snapshot, total.engine_stats = self.snapshot, self.engine_stats
        for state in (self.state(), *others):
            total._add(state)
        return "\n".join(total._lines()) + "\n"

    def _add(self, state: dict) -> None:
        self.prompt_tokens += state["prompt_tokens"]
        self.generation_tokens += state["generation_tokens"]
        for reason, n in state["finished"].items():
            self.finished[reason] = self.finished.get(reason, 0) + n
        for name, histogram in self._histograms().items():
            histogram.add(*state[name])

    def _engine_lines(self, label: str) -> list[str]:
        """Each engine core's gauges, labelled ``engine`` (0, 1, ... under data parallelism)."""
        engines = self.engine_stats or {0: self.snapshot}
        out: list[str] = []
        for name, kind, text, field in ENGINE_GAUGES:
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            out += [f'{name}{{{label},engine="{d}"}} {getattr(engines[d], field)}' for d in sorted(engines)]
        return out

    def _histograms(self) -> dict[str, Histogram]:
        return {"ttft": self.ttft, "itl": self.itl, "e2e": self.e2e}

    def _lines(self) -> list[str]:
        label = f'model_name="{_escape(self.model_name)}"'
        s = self.snapshot
        out = self._engine_lines(label)
        for name, kind, text, value in (
            ("pagoda:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.", self.prompt_tokens),
            ("pagoda:generation_tokens_total", "counter", "Generated tokens.", self.generation_tokens),
        ):
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{label}}} {value}"]
        out += ["# HELP pagoda:request_success_total Finished sequences by finish reason.",
                "# TYPE pagoda:request_success_total counter"]
        out += [f'pagoda:request_success_total{{{label},finished_reason="{r}"}} {n}' for r, n in sorted(self.finished.items())]
        out += _spec_decode_lines(s, label)
        out += _kv_connector_lines(s, label)
        for name, text, hist in (
            ("pagoda:time_to_first_token_seconds", "Arrival to first generated token.", self.ttft),
            ("pagoda:inter_token_latency_seconds", "Time between consecutive tokens of a request.", self.itl),
            ("pagoda:e2e_request_latency_seconds", "Arrival to finish.", self.e2e),
        ):
            out += [f"# HELP {name} {text}", f"# TYPE {name} histogram", *hist.render(name, label)]
        return out


def _spec_decode_lines(s: StepStats, label: str) -> list[str]:
    """Speculative decoding (only when the engine speculates): counters as in vLLM, plus the
    acceptance rate and mean acceptance length (1 + accepted drafts per round) they imply, and the
    goodput controller's steps, state and measured ratio."""
    if not s.spec_accepted_per_position:
        return []
    rounds, drafted, accepted = s.spec_num_drafts, s.spec_num_draft_tokens, s.spec_num_accepted_tokens
    out: list[str] = []
    for name, kind, text, value in (
        ("pagoda:spec_decode_num_drafts_total", "counter",
         "Verification rounds (a request verifying drafts in a step).", rounds),
        ("pagoda:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", drafted),
        ("pagoda:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", accepted),
        ("pagoda:spec_decode_acceptance_rate", "gauge", "Accepted over verified draft tokens since start (0-1).",
         accepted / drafted if drafted else 0.0),
        ("pagoda:spec_decode_mean_acceptance_length", "gauge",
         "Tokens emitted per verification round since start (1 + accepted drafts).",
         1 + accepted / rounds if rounds else 0.0),
        ("pagoda:spec_decode_num_steps_total", "counter", "Engine steps.", s.spec_num_steps),
        ("pagoda:spec_decode_num_suspended_steps_total", "counter",
         "Engine steps with speculation suspended (steps with drafts measured slower per token).",
         s.spec_num_suspended_steps),
        ("pagoda:spec_decode_suspended", "gauge", "1 while speculation is suspended.", int(s.spec_suspended)),
        ("pagoda:spec_decode_goodput_ratio", "gauge",
         "Measured tokens per second speculating over suspended (0 until both are measured).", s.spec_goodput_ratio),
    ):
        out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name}{{{label}}} {value}"]
    name = "pagoda:spec_decode_num_accepted_tokens_per_pos_total"
    out += [f"# HELP {name} Rounds whose draft at this position (0-based) was accepted.", f"# TYPE {name} counter"]
    out += [f'{name}{{{label},position="{j}"}} {n}' for j, n in enumerate(s.spec_accepted_per_position)]
    return out


def _kv_connector_lines(s: StepStats, label: str) -> list[str]:
    """A KV connector's counters (only when it moved or failed to move a block: docs/kv_offload.md)."""
    values = (s.kv_connector_loaded_blocks, s.kv_connector_load_failed_blocks, s.kv_connector_saved_blocks,
              s.kv_connector_save_failures, s.kv_connector_dropped_saves)
    if not any(values):
        return []
    out: list[str] = []
    for (name, text), value in zip((
        ("pagoda:kv_connector_loaded_blocks_total", "KV blocks loaded from the KV connector instead of computed."),
        ("pagoda:kv_connector_load_failed_blocks_total",
         "KV blocks the connector offered but a rank could not load (recomputed)."),
        ("pagoda:kv_connector_saved_blocks_total", "KV blocks handed to the KV connector."),
        ("pagoda:kv_connector_save_failures_total", "KV block saves that failed (the engine went on)."),
        ("pagoda:kv_connector_dropped_saves_total",
         "KV blocks not saved: every host buffer was waiting for the connector."),
    ), values):
        out += [f"# HELP {name} {text}", f"# TYPE {name} counter", f"{name}{{{label}}} {value}"]
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
