"""benchmarks/scheduler_replay.py: Pagoda's scheduler replayed against a step-time model. The replay must deliver
every token, time each step by the model, honour the scheduler's limits and its prefix cache."""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import scheduler_replay as sr
from pagoda.interfaces.scheduler import SchedulerConfig

ONE_MS = sr.StepCost(base_ms=1.0, decode_ms=0.0, decode_key_ms=0.0, prompt_token_ms=0.0, prompt_pair_ms=0.0)


def config(**limits) -> SchedulerConfig:
    return SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=512, **limits)


def test_every_token_arrives_once_a_step_at_the_models_time():
    prompts = [([100 + i] * 40, 5) for i in range(12)]  # 480 prompt tokens, a 64-token budget, 8 seats
    trace = sr.replay(prompts, [0.0] * 12, config(), ONE_MS, num_blocks=256)
    assert all(len(t) == 5 for t in trace.tokens.values())
    assert all(b - a >= 1.0 for t in trace.tokens.values() for a, b in zip(t, t[1:]))
    assert max(t[-1] for t in trace.tokens.values()) == len(trace.steps)  # 1 ms a step, nothing between
    assert sum(s[1] for s in trace.steps) == 480  # every prompt token computed once (no shared prefix)
    first = sorted(t[0] for t in trace.tokens.values())
    assert first[0] >= 1.0 and first[-1] > first[0]  # the 12 prompts cannot all start in the first step


def test_the_step_model_adds_up_what_a_step_computes():
    cost = sr.StepCost(base_ms=2.0, decode_ms=0.5, decode_key_ms=0.01, prompt_token_ms=0.1, prompt_pair_ms=0.001)
    assert cost.step_ms(decodes=4, decode_keys=100, prompt_tokens=10, prompt_pairs=55) == pytest.approx(
        2.0 + 2.0 + 1.0 + 1.0 + 0.055)
    trace = sr.replay([([7] * 10, 2)], [0.0], config(), cost, num_blocks=16)
    # step 1: the 10-token prompt (55 causal pairs); step 2: one decode reading 11 keys
    assert [round(s[0], 4) for s in trace.steps] == [round(2.0 + 1.0 + 0.055, 4), round(2.0 + 0.5 + 0.11, 4)]


def longest_gap(trace: sr.Trace) -> float:
    return max(b - a for t in trace.tokens.values() for a, b in zip(t, t[1:]))


def test_a_prefill_cap_bounds_the_steps_beside_decodes_and_shortens_the_longest_gap():
    prompts = [([1000 + i] * 60, 30) for i in range(32)]
    times = [0.0] * 8 + [5.0] * 24  # a burst joins running decodes
    kw = dict(config=SchedulerConfig(max_num_seqs=32, max_num_batched_tokens=2048, max_model_len=512),
              cost=sr.StepCost(), num_blocks=1024)
    free = sr.replay(prompts, times, **kw)
    capped = sr.replay(prompts, times, **{**kw, "config": SchedulerConfig(
        max_num_seqs=32, max_num_batched_tokens=2048, max_model_len=512, max_prefill_tokens_while_decoding=128)})
    assert max(s[1] for s in free.steps if s[2]) > 128
    assert max(s[1] for s in capped.steps if s[2]) <= 128
    assert longest_gap(capped) < longest_gap(free) / 3  # the running decodes wait 8 ms a step, not 36
    assert sr.summary(capped)["p99_ttft_ms"] > sr.summary(free)["p99_ttft_ms"]  # the trade: the last prompt waits


def test_a_shared_prefix_is_computed_once_its_blocks_are_cached():
    prefix = list(range(1, 65))  # four 16-token blocks
    prompts = [(prefix + [500 + i] * 8, 3) for i in range(4)]
    trace = sr.replay(prompts, [0.0, 100.0, 200.0, 300.0], config(), ONE_MS, num_blocks=64)
    assert sum(s[1] for s in trace.steps) == 72 + 3 * 8  # later requests compute their own 8 tokens only


def test_a_cache_too_small_for_one_prompt_is_an_error_not_a_hang():
    with pytest.raises(RuntimeError, match="num_blocks"):
        sr.replay([([5] * 40, 2)], [0.0], config(), ONE_MS, num_blocks=2)  # 32 tokens of KV for a 40-token prompt


def test_arrivals_are_a_burst_or_a_poisson_process():
    assert sr.arrivals(3, math.inf, 0) == [0.0, 0.0, 0.0]
    times = sr.arrivals(4000, 8.0, 1)
    assert times == sorted(times) and times[-1] / 4000 == pytest.approx(125.0, rel=0.05)  # 8/s: 125 ms apart


def test_the_cli_replays_a_peers_workload_under_each_setting(tmp_path, capsys):
    out = tmp_path / "replay.json"
    assert sr.main(["--workload", "prefix", "--max-prefill-tokens-while-decoding", "0,2048", "--result-file",
                    str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["limits"] for r in rows] == [{"max_prefill_tokens_while_decoding": 0},
                                           {"max_prefill_tokens_while_decoding": 2048}]
    free, capped = rows
    assert free["max_mixed_step_prompt_tokens"] > 2048 >= capped["max_mixed_step_prompt_tokens"]
    assert capped["p99_itl_ms"] < free["p99_itl_ms"] and capped["p50_ttft_ms"] > free["p50_ttft_ms"]
    assert len(capsys.readouterr().out.splitlines()) == 2
