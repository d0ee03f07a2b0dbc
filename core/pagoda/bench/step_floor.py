"""Where an offline run's time goes, step by step: each engine step's time, from the engine core's trace
(``PAGODA_TRACE_DIR``), against that step's floor on this device, decode-only and mixed steps (some sequence
computes prompt tokens) apart. ``pagoda bench throughput --step-report`` adds this to its result.

A step's floor is the larger of its compute time at the measured matmul rate (2 FLOPs per weight per token,
the LM head's only for the rows a step samples, one a sequence; causal attention's FLOPs per visible key) and
its memory time at the measured copy bandwidth (every streamed weight once, each request's keys and values
once). With overlapped steps an engine call mostly waits for the step launched before it, so a call's time is
that step's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

def attention_flops_per_pair(hf_config) -> int:
    """QK^T and PV FLOPs of one (query, visible key) pair over every layer and query head: 4 * head_dim a head;
    multi-head latent attention (absorbed) scores the latent row and weights its kv_lora_rank values."""
    from pagoda.models import spec

    heads, layers = int(hf_config.num_attention_heads), spec.num_kv_cache_layers(hf_config)
    mla = spec.mla_spec(hf_config)
    per_key = 2 * (mla.latent_size + mla.kv_lora_rank) if mla else 4 * spec.head_dim(hf_config)
    return per_key * heads * layers


@dataclass(frozen=True)
class StepCosts:
    """What a step's floor is made of, on one device (one tensor-parallel rank's share)."""

    body_params: int  # weights every token multiplies (the LM head's apart)
    head_params: int  # the LM head's, multiplied by each sampled row
    attention_flops_per_pair: float
    weight_bytes: int
    kv_bytes_per_token: int
    matmul_flops: float  # per second
    copy_bytes: float  # per second

    def floor_s(self, step: dict) -> float:
        flops = (2 * self.body_params * step["tokens"] + 2 * self.head_params * step["seqs"]
                 + self.attention_flops_per_pair * step["pairs"])
        memory = self.weight_bytes + self.kv_bytes_per_token * step["kv"]
        return max(flops / self.matmul_flops, memory / self.copy_bytes)


def read_steps(trace_dir: Path, since: float) -> list[dict]:
    """The engine core's step lines that started at ``since`` or later, in order (empty calls too: with overlapped
    steps the call after the last step waits for it)."""
    lines = (json.loads(line) for line in (trace_dir / "core.jsonl").read_text().splitlines() if line.strip())
    return [line for line in lines if "step" in line and line["step"] >= since]


def timed_steps(calls: list[dict], overlap: bool) -> list[tuple[dict, float]]:
    """(step, its time) of each call that ran sequences: its own call's time, or with overlapped steps the next
    call's (the last one keeps its own)."""
    times = [c["seconds"] for c in calls]
    if overlap:
        times = times[1:] + times[-1:]
    return [(call, seconds) for call, seconds in zip(calls, times) if call["seqs"]]


def step_report(calls: list[dict], costs: StepCosts, overlap: bool, wall_s: float, since: float) -> dict:
    """Steps, seconds, floor seconds and their ratio for all steps and each kind, the mean step's size, and the
    run's time outside the engine's step calls (started at ``since``): in all, before the first call (the
    requests' way in), after the last (the outputs' way out) and between calls."""
    groups: dict[str, list[tuple[dict, float]]] = {"all": [], "decode": [], "mixed": []}
    for step, seconds in timed_steps(calls, overlap):
        groups["all"].append((step, seconds))
        groups["decode" if step["tokens"] == step["seqs"] else "mixed"].append((step, seconds))
    report = {name: _summary(rows, costs) for name, rows in groups.items() if rows}
    report["outside_steps_s"] = round(wall_s - sum(c["seconds"] for c in calls), 4)
    if calls:
        report["before_first_step_s"] = round(calls[0]["step"] - since, 4)
        report["after_last_step_s"] = round(since + wall_s - calls[-1]["step"] - calls[-1]["seconds"], 4)
    return report


def _summary(rows: list[tuple[dict, float]], costs: StepCosts) -> dict:
    seconds = sum(t for _, t in rows)
    floor = sum(costs.floor_s(step) for step, _ in rows)
    n = len(rows)
    return {"steps": n, "seconds": seconds, "floor_s": floor,
            "ratio_to_floor": round(seconds / floor, 3) if floor else None,
            "mean_step_ms": round(seconds / n * 1e3, 3), "mean_tokens": round(sum(s["tokens"] for s, _ in rows) / n, 1),
            "mean_seqs": round(sum(s["seqs"] for s, _ in rows) / n, 1),
            "mean_kv_tokens": round(sum(s["kv"] for s, _ in rows) / n, 1)}


def step_costs(parts, rates: dict[str, float]) -> StepCosts:
    """The costs of this engine's steps on its device, from ``device_rates``' measured rates."""
    from pagoda.bench.common import active_params, kv_bytes_per_token, streamed_weights
    from pagoda.layers.embedding import LMHead

    weight_bytes, num_params = streamed_weights(parts.model)
    head = sum(m.weight.numel() for m in parts.model.modules() if isinstance(m, LMHead))
    return StepCosts(body_params=active_params(parts.model, num_params, parts.hf_config) - head, head_params=head,
                     attention_flops_per_pair=attention_flops_per_pair(parts.hf_config) / parts.tp.size,
                     weight_bytes=weight_bytes, kv_bytes_per_token=kv_bytes_per_token(parts),
                     matmul_flops=rates["matmul_flops"], copy_bytes=rates["copy_bytes"])
