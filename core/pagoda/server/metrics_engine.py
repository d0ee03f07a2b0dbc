"""The engine cores' series of /metrics: gauges and counters each core sends with its outputs
(:class:`~pagoda.messages.StepStats`), one series per core under the label ``engine``."""

from __future__ import annotations

from pagoda.messages import ITERATION_TOKENS_BUCKETS, StepStats
from pagoda.server.metric_family import Histogram, header

ENGINE_SERIES = (  # (name without prefix, kind, help, StepStats field): one line per engine core
    ("num_requests_running", "gauge", "Requests in the running batch.", "num_running"),
    ("num_requests_waiting", "gauge", "Requests waiting to be scheduled.", "num_waiting"),
    ("kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).", "kv_cache_usage"),
    ("prefix_cache_hit_rate", "gauge", "Prefix cache hit rate over all lookups (0-1).", "prefix_cache_hit_rate"),
    ("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", "prefix_cache_queries"),
    ("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", "prefix_cache_hits"),
    ("num_preemptions_total", "counter", "Requests preempted (recomputed later).", "num_preemptions"),
)


def engine_lines(prefix: str, label: str, engines: dict[int, StepStats]) -> list[str]:
    """Each engine core's gauges and counters, labelled ``engine`` (0, 1, ... under data parallelism), and
    its steps by tokens computed (``iteration_tokens_total``)."""
    out: list[str] = []
    for name, kind, text, attribute in ENGINE_SERIES:
        name = f"{prefix}:{name}"
        out += header(name, kind, text)
        out += [f'{name}{{{label},engine="{d}"}} {getattr(engines[d], attribute)}' for d in sorted(engines)]
    name = f"{prefix}:iteration_tokens_total"
    out += header(name, "histogram", "Tokens computed per engine step.")
    for d in sorted(engines):
        stats = engines[d]
        counts = stats.iteration_tokens or [0] * (len(ITERATION_TOKENS_BUCKETS) + 1)
        steps = Histogram(ITERATION_TOKENS_BUCKETS, counts[:-1], float(stats.iteration_tokens_sum), sum(counts))
        out += steps.render(name, f'{label},engine="{d}"')
    return out


def spec_decode_lines(prefix: str, s: StepStats, label: str) -> list[str]:
    """Speculative decoding (only when the engine speculates): counters as in vLLM, plus the
    acceptance rate and mean acceptance length (1 + accepted drafts per round) they imply, and the
    goodput controller's steps, state and measured ratio."""
    if not s.spec_accepted_per_position:
        return []
    rounds, drafted, accepted = s.spec_num_drafts, s.spec_num_draft_tokens, s.spec_num_accepted_tokens
    out: list[str] = []
    for name, kind, text, value in (
        ("spec_decode_num_drafts_total", "counter",
         "Verification rounds (a request verifying drafts in a step).", rounds),
        ("spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified.", drafted),
        ("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", accepted),
        ("spec_decode_acceptance_rate", "gauge", "Accepted over verified draft tokens since start (0-1).",
         accepted / drafted if drafted else 0.0),
        ("spec_decode_mean_acceptance_length", "gauge",
         "Tokens emitted per verification round since start (1 + accepted drafts).",
         1 + accepted / rounds if rounds else 0.0),
        ("spec_decode_num_steps_total", "counter", "Engine steps.", s.spec_num_steps),
        ("spec_decode_num_suspended_steps_total", "counter",
         "Engine steps with speculation suspended (steps with drafts measured slower per token).",
         s.spec_num_suspended_steps),
        ("spec_decode_suspended", "gauge", "1 while speculation is suspended.", int(s.spec_suspended)),
        ("spec_decode_goodput_ratio", "gauge",
         "Measured tokens per second speculating over suspended (0 until both are measured).", s.spec_goodput_ratio),
    ):
        out += header(f"{prefix}:{name}", kind, text) + [f"{prefix}:{name}{{{label}}} {value}"]
    name = f"{prefix}:spec_decode_num_accepted_tokens_per_pos_total"
    out += header(name, "counter", "Rounds whose draft at this position (0-based) was accepted.")
    out += [f'{name}{{{label},position="{j}"}} {n}' for j, n in enumerate(s.spec_accepted_per_position)]
    return out


def kv_connector_lines(prefix: str, s: StepStats, label: str) -> list[str]:
    """A KV connector's counters (only when it moved or failed to move a block: docs/kv_offload.md)."""
    values = (s.kv_connector_loaded_blocks, s.kv_connector_load_failed_blocks, s.kv_connector_saved_blocks,
              s.kv_connector_save_failures, s.kv_connector_dropped_saves)
    if not any(values):
        return []
    out: list[str] = []
    for (name, text), value in zip((
        ("kv_connector_loaded_blocks_total", "KV blocks loaded from the KV connector instead of computed."),
        ("kv_connector_load_failed_blocks_total",
         "KV blocks the connector offered but a rank could not load (recomputed)."),
        ("kv_connector_saved_blocks_total", "KV blocks handed to the KV connector."),
        ("kv_connector_save_failures_total", "KV block saves that failed (the engine went on)."),
        ("kv_connector_dropped_saves_total",
         "KV blocks not saved: every host buffer was waiting for the connector."),
    ), values):
        out += header(f"{prefix}:{name}", "counter", text) + [f"{prefix}:{name}{{{label}}} {value}"]
    return out
