"""The scheduler's latency limits on prefills (pagoda.scheduler.prefill_limits), driven step by step with fake
requests: which requests each step schedules, and how many tokens each."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from test_scheduler import expected_outputs, make, req, scheduled, step  # noqa: E402

from pagoda.config import EngineConfig  # noqa: E402
from pagoda.request import RequestStatus  # noqa: E402
from pagoda.scheduler import FcfsScheduler, PriorityScheduler  # noqa: E402


def run_until_output(sched, kv, request_id: str) -> list[dict[str, int]]:
    """Steps until ``request_id`` sampled its first token; each step's scheduled tokens."""
    steps = []
    while sched.get_request(request_id).num_output_tokens == 0:
        steps.append(scheduled(step(sched, kv)))
    return steps


def test_a_long_prompt_computes_at_most_the_threshold_a_step_beside_decodes_and_short_prompts():
    sched, kv = make(max_num_batched_tokens=32, long_prefill_token_threshold=8)
    sched.add_request(req("d", range(4), max_tokens=12))
    assert scheduled(step(sched, kv)) == {"d": 4}
    sched.add_request(req("long", range(100, 140), max_tokens=2))
    sched.add_request(req("s", range(200, 206), max_tokens=8))
    steps = run_until_output(sched, kv, "long")
    assert steps[0] == {"d": 1, "long": 8, "s": 6}  # without the threshold: {"d": 1, "long": 31}, s waits
    assert [s["long"] for s in steps] == [8, 8, 8, 8, 8]  # the last 8 are not long any more: one chunk
    assert all(s["d"] == 1 for s in steps) and all(s["s"] == 1 for s in steps[1:])


def test_without_limits_a_long_prompt_takes_the_whole_budget():
    sched, kv = make(max_num_batched_tokens=32)
    sched.add_request(req("d", range(4), max_tokens=12))
    step(sched, kv)
    sched.add_request(req("long", range(100, 140), max_tokens=2))
    sched.add_request(req("s", range(200, 206), max_tokens=8))
    assert scheduled(step(sched, kv)) == {"d": 1, "long": 31}
    assert scheduled(step(sched, kv)) == {"d": 1, "long": 9, "s": 6}


def test_a_long_prompt_waiting_for_a_long_seat_steps_aside_and_keeps_its_place():
    sched, kv = make(max_num_batched_tokens=32, long_prefill_token_threshold=8, max_num_partial_prefills=3)
    for rid, start, length in (("L1", 0, 20), ("L2", 100, 20), ("S", 200, 5), ("L3", 300, 20)):
        sched.add_request(req(rid, range(start, start + length), max_tokens=8))
    assert scheduled(step(sched, kv)) == {"L1": 8, "S": 5}  # L2 and L3 wait for L1's long seat
    assert sched.num_waiting == 2
    assert scheduled(step(sched, kv)) == {"S": 1, "L1": 8}
    assert scheduled(step(sched, kv)) == {"S": 1, "L1": 4, "L2": 8}  # L1 finishes its prefill: L2, not L3
    assert scheduled(step(sched, kv)) == {"L1": 1, "S": 1, "L2": 8}
    assert scheduled(step(sched, kv)) == {"L1": 1, "S": 1, "L2": 4, "L3": 8}


def test_more_long_seats_admit_long_prompts_together():
    sched, kv = make(max_num_batched_tokens=32, long_prefill_token_threshold=8, max_num_partial_prefills=3,
                     max_long_partial_prefills=2)
    for rid, start, length in (("L1", 0, 20), ("L2", 100, 20), ("S", 200, 5), ("L3", 300, 20)):
        sched.add_request(req(rid, range(start, start + length), max_tokens=8))
    assert scheduled(step(sched, kv)) == {"L1": 8, "L2": 8, "S": 5}


def test_max_num_partial_prefills_keeps_a_short_prompt_that_would_be_split_waiting():
    def first_step(partial: int) -> dict[str, int]:
        sched, kv = make(max_num_batched_tokens=16, long_prefill_token_threshold=12, max_num_partial_prefills=partial)
        for rid, start, length in (("A", 0, 30), ("B", 100, 10), ("C", 200, 3)):
            sched.add_request(req(rid, range(start, start + length), max_tokens=4))
        return scheduled(step(sched, kv))

    assert first_step(1) == {"A": 12}  # B would be a second split prompt; C waits behind it (head of line)
    assert first_step(2) == {"A": 12, "B": 4}


def test_prompt_tokens_are_capped_only_in_steps_that_run_decodes():
    sched, kv = make(max_num_batched_tokens=32, max_prefill_tokens_while_decoding=6)
    sched.add_request(req("A", range(4), max_tokens=10))
    sched.add_request(req("B", range(100, 120), max_tokens=10))
    assert scheduled(step(sched, kv)) == {"A": 4, "B": 20}  # nothing decodes yet: the whole budget
    sched.add_request(req("C", range(200, 212), max_tokens=4))
    assert scheduled(step(sched, kv)) == {"A": 1, "B": 1, "C": 6}
    sched.add_request(req("D", range(300, 305), max_tokens=4))
    assert scheduled(step(sched, kv)) == {"A": 1, "B": 1, "C": 6}  # the 6 prompt tokens are C's: D waits
    assert scheduled(step(sched, kv)) == {"A": 1, "B": 1, "C": 1, "D": 5}


LIMITS = [
    dict(long_prefill_token_threshold=6),
    dict(long_prefill_token_threshold=6, max_num_partial_prefills=3, max_long_partial_prefills=2),
    dict(max_prefill_tokens_while_decoding=5, max_num_partial_prefills=2),
]


@pytest.mark.parametrize("kind", [FcfsScheduler, PriorityScheduler])
@pytest.mark.parametrize("limits", LIMITS)
def test_random_workload_keeps_the_limits_and_reproduces_outputs(kind, limits):
    rng = random.Random(11)
    sched, kv = make(kind, num_blocks=24, max_num_seqs=6, max_num_batched_tokens=24, max_model_len=48, **limits)
    requests, threshold = [], limits.get("long_prefill_token_threshold", 0)
    for t in range(300):
        if len(requests) < 40 and rng.random() < 0.4:
            prompt = [rng.randrange(500) for _ in range(rng.randrange(1, 30))]
            r = req(f"q{len(requests)}", prompt, rng.randrange(1, 12), rng.randrange(3), float(t))
            requests.append(r)
            sched.add_request(r)
        before = {r.request_id: r.num_tokens - r.num_computed_tokens for r in sched.running}
        out = step(sched, kv)
        prefills = [(r, n) for r, n in zip(out.requests, out.num_tokens) if n > 1]
        if threshold:
            assert all(n <= threshold for _, n in prefills)
        cap = limits.get("max_prefill_tokens_while_decoding")
        if cap and any(v == 1 for v in before.values()):
            assert sum(n for _, n in prefills) <= cap
        split = [r for r in sched.running if r.num_tokens - r.num_computed_tokens > 1]
        assert len(split) <= limits.get("max_num_partial_prefills", 1)
    while sched.has_unfinished():
        step(sched, kv)
    assert kv.num_free_blocks == kv.num_blocks
    for r in requests:
        assert r.status is RequestStatus.FINISHED_LENGTH and r.output_token_ids == expected_outputs(r)


@pytest.mark.parametrize("fields, message", [
    (dict(max_num_partial_prefills=0), "max_num_partial_prefills"),
    (dict(max_num_partial_prefills=2, max_long_partial_prefills=3), "no larger"),
    (dict(long_prefill_token_threshold=-1), "long_prefill_token_threshold"),
    (dict(max_prefill_tokens_while_decoding=64, enable_chunked_prefill=False), "chunked prefill"),
])
def test_engine_config_refuses_bad_limits_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**fields)
