"""The public SchedulingPolicy contract: a plugin's policy on PolicyScheduler decides admission order,
admission, running order and preemption victims; the mechanics (budget, KV invariants) stay the core's."""

from __future__ import annotations

import pytest

from pagoda.interfaces import SchedulingPolicy
from pagoda.request import RequestStatus
from pagoda.scheduler import FcfsScheduler, KeyedWaitingQueue, PolicyScheduler, PriorityScheduler

from test_scheduler import expected_outputs, make, req, scheduled, step


class ShortestFirst(SchedulingPolicy):
    """Shortest prompt first; at most one prompt of 8+ tokens running; preempts the first candidate after
    the one that needs blocks (the earliest admitted of the others), never the newest."""

    def new_waiting_queue(self) -> KeyedWaitingQueue:
        return KeyedWaitingQueue(lambda r: r.num_prompt_tokens)

    def may_admit(self, request, running) -> bool:
        return request.num_prompt_tokens < 8 or all(r.num_prompt_tokens < 8 for r in running)

    def preemption_victim(self, candidates):
        return candidates[1] if len(candidates) > 1 else candidates[0]


class ShortestFirstScheduler(PolicyScheduler):
    description = "test: shortest prompt first"
    policy_class = ShortestFirst


def test_the_builtin_schedulers_are_policies() -> None:
    assert FcfsScheduler.policy_class.__name__ == "FcfsPolicy"
    assert PriorityScheduler.policy_class.__name__ == "PriorityPolicy"
    assert PolicyScheduler.policy_class is FcfsScheduler.policy_class  # a scheduler without a policy is FCFS


def test_waiting_order_comes_from_the_policy_queue() -> None:
    sched, kv = make(ShortestFirstScheduler, max_num_seqs=1, max_num_batched_tokens=64)
    for rid, length in (("six", 6), ("two", 2), ("four", 4), ("three", 3)):
        sched.add_request(req(rid, range(100, 100 + length), max_tokens=1))
    order = [next(iter(scheduled(step(sched, kv)))) for _ in range(4)]
    assert order == ["two", "three", "four", "six"]


def test_may_admit_holds_the_head_and_everything_behind_it() -> None:
    sched, kv = make(ShortestFirstScheduler, max_num_batched_tokens=64)
    sched.add_request(req("long-a", range(10), max_tokens=3))
    sched.add_request(req("long-b", range(20, 30), max_tokens=3))
    assert scheduled(step(sched, kv)) == {"long-a": 10}  # long-b waits: one long prompt at a time
    sched.add_request(req("long-c", range(40, 52), max_tokens=1))  # behind long-b (longer)
    assert scheduled(step(sched, kv)) == {"long-a": 1} and sched.num_waiting == 2
    step(sched, kv)  # long-a finishes
    assert scheduled(step(sched, kv)) == {"long-b": 10}


def test_the_policy_chooses_the_preemption_victim() -> None:
    sched, kv = make(ShortestFirstScheduler, num_blocks=7, max_num_batched_tokens=64, caching=False)
    for i in range(3):
        sched.add_request(req(f"r{i}", range(i * 10, i * 10 + 7), max_tokens=4))
    step(sched, kv)
    step(sched, kv)  # each holds 2 of the 7 blocks, 8 tokens
    out = step(sched, kv)  # r0 takes the free block; r1 needs one: its victim is candidates[1], r2
    assert [r.request_id for r in out.preempted] == ["r2"]
    victims = {}

    class FirstOther(ShortestFirst):
        def preemption_victim(self, candidates):
            victims.setdefault("seen", [r.request_id for r in candidates])
            return candidates[0]  # the request that needs blocks preempts itself

    class Scheduler(PolicyScheduler):
        policy_class = FirstOther

    sched, kv = make(Scheduler, num_blocks=7, max_num_batched_tokens=64, caching=False)
    requests = [req(f"r{i}", range(i * 10, i * 10 + 7), max_tokens=4) for i in range(3)]
    for r in requests:
        sched.add_request(r)
    step(sched, kv)
    step(sched, kv)
    out = step(sched, kv)  # r1 preempts itself; r2 (after it) still runs this step
    assert victims["seen"] == ["r1", "r2"]
    assert [r.request_id for r in out.preempted] == ["r1"] and scheduled(out) == {"r0": 1, "r2": 1}
    while sched.has_unfinished():
        step(sched, kv)
    assert all(r.status is RequestStatus.FINISHED_LENGTH and r.output_token_ids == expected_outputs(r)
               for r in requests)


def test_a_victim_outside_the_candidates_is_refused_with_the_fix() -> None:
    class Wrong(ShortestFirst):
        def preemption_victim(self, candidates):
            return req("stranger", [1])

    class Scheduler(PolicyScheduler):
        policy_class = Wrong

    sched, kv = make(Scheduler, num_blocks=4, max_num_batched_tokens=64, caching=False)
    sched.add_request(req("r0", range(7), max_tokens=8))
    sched.add_request(req("r1", range(10, 17), max_tokens=8))
    step(sched, kv)
    step(sched, kv)
    with pytest.raises(RuntimeError, match="Wrong.preemption_victim returned a request that is not among"):
        step(sched, kv)
