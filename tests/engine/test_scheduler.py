"""FCFS and priority schedulers driven by a fake model loop, checking KV invariants every step."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest

from pagoda.kv_cache.manager import KVCacheManager
from pagoda.request import Request, RequestStatus
from pagoda.interfaces.scheduler import SchedulerConfig, SchedulerOutput
from pagoda import builtin
from pagoda.scheduler import FcfsScheduler, PriorityScheduler

BS = 4


def make(kind=FcfsScheduler, num_blocks=64, caching=True, **config):
    config.setdefault("max_model_len", 64)
    kv = KVCacheManager(num_blocks, BS, enable_prefix_caching=caching)
    return kind(SchedulerConfig(**config), kv), kv


def req(rid: str, prompt, max_tokens: int = 4, priority: int = 0, arrival: float = 0.0) -> Request:
    return Request(rid, list(prompt), SimpleNamespace(max_tokens=max_tokens), arrival_time=arrival, priority=priority)


def fake_token(request: Request) -> int:
    """The "model" samples a function of the position, so recomputation reproduces outputs."""
    return 1000 + request.num_tokens


def check_invariants(sched, kv: KVCacheManager) -> None:
    holdings: Counter[int] = Counter()
    for r in sched.running:
        ids = kv.block_ids(r.request_id)
        assert len(ids) == len(set(ids)), "a block held twice by one request"
        assert len(ids) * BS >= r.num_computed_tokens
        holdings.update(ids)
    assert sum(b.ref_count for b in kv.pool.blocks) == sum(holdings.values())
    for block in kv.pool.blocks:
        assert block.ref_count == holdings[block.block_id]
    used = sum(1 for b in kv.pool.blocks if b.ref_count)
    assert used + kv.num_free_blocks == kv.num_blocks
    assert len(sched.running) <= sched.config.max_num_seqs


def check_output(sched, kv: KVCacheManager, out: SchedulerOutput) -> None:
    assert out.total_tokens <= sched.config.max_num_batched_tokens
    assert len({r.request_id for r in out.requests}) == len(out.requests)
    seen_prefill = False
    for r, n in zip(out.requests, out.num_tokens):
        assert n > 0 and r.status is RequestStatus.RUNNING
        assert len(kv.block_ids(r.request_id)) * BS >= r.num_computed_tokens + n  # KV slots exist
        is_decode = n == 1 and r.num_computed_tokens + 1 == r.num_tokens
        assert not (is_decode and seen_prefill), "a decode after a prefill"
        seen_prefill |= not is_decode


def step(sched, kv) -> SchedulerOutput:
    """One engine step: schedule, fake-run, update, finish requests that reached max_tokens."""
    out = sched.schedule()
    check_output(sched, kv, out)
    sampled = {
        r.request_id: fake_token(r)
        for r, n in zip(out.requests, out.num_tokens)
        if r.num_computed_tokens + n == r.num_tokens
    }
    sched.update_from_output(out, sampled)
    for r in out.requests:
        if r.num_output_tokens >= r.sampling_params.max_tokens:
            sched.finish(r.request_id, RequestStatus.FINISHED_LENGTH)
    check_invariants(sched, kv)
    return out


def scheduled(out: SchedulerOutput) -> dict[str, int]:
    return {r.request_id: n for r, n in zip(out.requests, out.num_tokens)}


def expected_outputs(r: Request) -> list[int]:
    return [1000 + r.num_prompt_tokens + i for i in range(r.sampling_params.max_tokens)]


def test_builtin_registers_both_schedulers():
    found = {}
    builtin.register_schedulers(lambda name, obj: found.setdefault(name, obj))
    assert found == {"fcfs": FcfsScheduler, "priority": PriorityScheduler}
    assert FcfsScheduler.description and PriorityScheduler.description


def test_token_budget_and_chunked_prefill_across_steps():
    sched, kv = make(max_num_batched_tokens=16)
    long = req("long", range(50), max_tokens=2)
    sched.add_request(long)
    chunks = []
    while long.num_output_tokens == 0:
        out = step(sched, kv)
        chunks.append(scheduled(out)["long"])
    assert chunks == [16, 16, 16, 2]  # samples only when the prefill reaches the end
    assert long.num_output_tokens == 1 and long.num_computed_tokens == 50
    for i, rid in enumerate(("a", "b", "c")):
        sched.add_request(req(rid, range(100 * i + 100, 100 * i + 110)))  # no shared prefixes
    out = step(sched, kv)
    assert scheduled(out) == {"long": 1, "a": 10, "b": 5}  # decode first, then the budget's rest
    assert long.status is RequestStatus.FINISHED_LENGTH and sched.num_running == 2
    assert scheduled(step(sched, kv)) == {"a": 1, "b": 5, "c": 10}


def test_without_chunked_prefill_a_prompt_waits_until_it_fits():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        make(max_num_batched_tokens=16, enable_chunked_prefill=False)
    sched, kv = make(max_num_batched_tokens=16, max_model_len=16, enable_chunked_prefill=False)
    sched.add_request(req("a", range(10)))
    sched.add_request(req("b", range(20, 30)))
    assert scheduled(step(sched, kv)) == {"a": 10}
    assert scheduled(step(sched, kv)) == {"a": 1, "b": 10}


def test_continuous_batching_join_and_leave():
    sched, kv = make(max_num_batched_tokens=32)
    sched.add_request(req("a", range(5), max_tokens=3))
    sched.add_request(req("b", range(10, 17), max_tokens=6))
    assert scheduled(step(sched, kv)) == {"a": 5, "b": 7}
    sched.add_request(req("c", range(20, 26), max_tokens=2))
    assert scheduled(step(sched, kv)) == {"a": 1, "b": 1, "c": 6}
    assert scheduled(step(sched, kv)) == {"a": 1, "b": 1, "c": 1}  # a and c finish here
    assert sched.num_running == 1 and kv.block_ids("a") == [] and kv.block_ids("c") == []
    sched.add_request(req("d", range(30, 33)))
    assert scheduled(step(sched, kv)) == {"b": 1, "d": 3}


def test_max_num_seqs_limits_admission():
    sched, kv = make(max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(4):
        sched.add_request(req(f"r{i}", range(i * 10, i * 10 + 4), max_tokens=2))
    assert set(scheduled(step(sched, kv))) == {"r0", "r1"} and sched.num_waiting == 2
    assert set(scheduled(step(sched, kv))) == {"r0", "r1"}  # both finish
    assert set(scheduled(step(sched, kv))) == {"r2", "r3"}


def test_prefix_hits_on_admission_including_same_step():
    sched, kv = make(max_num_batched_tokens=64)
    prompt = list(range(13))
    sched.add_request(req("a", prompt))
    sched.add_request(req("b", prompt))  # same step: hits a's blocks registered at allocation
    out = step(sched, kv)
    assert scheduled(out) == {"a": 13, "b": 1}
    b = sched.get_request("b")
    assert b.num_cached_tokens == 12
    assert kv.block_ids("b")[:3] == kv.block_ids("a")[:3]


def _fill_three(kind, **extra):
    """Three 7-token prompts in 7 blocks: the step that needs third blocks runs out."""
    sched, kv = make(kind, num_blocks=7, max_num_batched_tokens=64, caching=False)
    for i, prio in enumerate(extra.get("priorities", (0, 0, 0))):
        sched.add_request(req(f"r{i}", range(i * 10, i * 10 + 7), max_tokens=4, priority=prio, arrival=i))
    step(sched, kv)  # 7 tokens each, 2 blocks each
    step(sched, kv)  # 8 tokens each, still 2 blocks
    return sched, kv


def test_fcfs_preempts_newest_and_it_resumes_by_recomputing():
    sched, kv = _fill_three(FcfsScheduler)
    out = step(sched, kv)  # r0 takes the last block; r1 preempts r2
    r2 = out.preempted[0]
    assert [r.request_id for r in out.preempted] == ["r2"] and scheduled(out) == {"r0": 1, "r1": 1}
    assert r2.status is RequestStatus.PREEMPTED and r2.num_computed_tokens == 0
    assert r2.num_preemptions == 1 and kv.block_ids("r2") == [] and sched.num_waiting == 1
    outs = [step(sched, kv) for _ in range(2)]
    assert "r2" not in scheduled(outs[0])  # waits until r0 and r1 finish and free blocks
    assert scheduled(outs[1]) == {"r2": 9}  # prompt + its 2 outputs, recomputed
    while sched.has_unfinished():
        step(sched, kv)
    assert r2.output_token_ids == expected_outputs(r2)
    assert kv.num_free_blocks == kv.num_blocks


def test_preemption_stops_when_the_request_is_its_own_victim():
    sched, kv = make(num_blocks=4, max_num_batched_tokens=64, caching=False)
    sched.add_request(req("r0", range(7), max_tokens=8))
    sched.add_request(req("r1", range(10, 17), max_tokens=8))
    step(sched, kv)
    step(sched, kv)
    out = step(sched, kv)  # r0 needs a third block: preempts r1, the end of the running list
    assert scheduled(out) == {"r0": 1} and [r.request_id for r in out.preempted] == ["r1"]
    sched, kv = make(num_blocks=5, max_num_batched_tokens=64, caching=False)
    for i in range(2):
        sched.add_request(req(f"r{i}", range(i * 10, i * 10 + 7), max_tokens=8))
    step(sched, kv)
    step(sched, kv)
    out = step(sched, kv)  # r0 takes the one free block; r1 is the end, so it preempts itself
    assert scheduled(out) == {"r0": 1} and [r.request_id for r in out.preempted] == ["r1"]
    assert sched.running == [sched.get_request("r0")]


def test_priority_preempts_lowest_priority_even_if_admitted_first():
    sched, kv = _fill_three(PriorityScheduler, priorities=(5, 0, 1))
    out = step(sched, kv)
    assert [r.request_id for r in out.preempted] == ["r0"]  # the largest (priority, arrival)
    assert scheduled(out) == {"r1": 1, "r2": 1}
    while sched.has_unfinished():
        step(sched, kv)
    r0 = out.preempted[0]
    assert r0.status is RequestStatus.FINISHED_LENGTH and r0.output_token_ids == expected_outputs(r0)


def test_priority_admission_order_and_decodes_first():
    sched, kv = make(PriorityScheduler, max_num_seqs=1, max_num_batched_tokens=64)
    for rid, prio, arrival in (("late0", 0, 3.0), ("p2", 2, 0.0), ("p1", 1, 1.0), ("early0", 0, 2.0)):
        sched.add_request(req(rid, range(4), max_tokens=1, priority=prio, arrival=arrival))
    order = [next(iter(scheduled(step(sched, kv)))) for _ in range(4)]
    assert order == ["early0", "late0", "p1", "p2"]

    sched, kv = make(PriorityScheduler, max_num_batched_tokens=8)
    sched.add_request(req("low", range(3), max_tokens=8, priority=1))
    step(sched, kv)
    sched.add_request(req("high", range(10, 20), max_tokens=2, priority=0))
    assert scheduled(step(sched, kv)) == {"low": 1, "high": 7}
    out = step(sched, kv)  # running order is [high (prefilling), low (decoding)]
    assert [r.request_id for r in sched.running] == ["high", "low"]
    assert [r.request_id for r in out.requests] == ["low", "high"] and out.num_tokens == [1, 3]


def test_abort_waiting_running_and_preempted_requests_frees_blocks():
    sched, kv = _fill_three(FcfsScheduler)
    step(sched, kv)  # r2 preempted, waiting again
    sched.add_request(req("w", range(40, 45)))
    assert sched.num_waiting == 2
    sched.finish("w", RequestStatus.FINISHED_ABORTED)
    sched.finish("r2", RequestStatus.FINISHED_ABORTED)
    assert sched.num_waiting == 0 and sched.get_request("w") is None
    r0 = sched.get_request("r0")
    sched.finish("r0", RequestStatus.FINISHED_ABORTED)
    assert r0.status is RequestStatus.FINISHED_ABORTED and kv.block_ids("r0") == []
    assert kv.num_free_blocks == 7 - 3 and sched.num_running == 1
    sched.finish("r0", RequestStatus.FINISHED_ABORTED)  # unknown ids are ignored
    while sched.has_unfinished():
        assert {"w", "r2"}.isdisjoint(scheduled(step(sched, kv)))
    assert kv.num_free_blocks == 7
    with pytest.raises(ValueError):
        sched.finish("r1", RequestStatus.RUNNING)


@pytest.mark.parametrize("kind", [FcfsScheduler, PriorityScheduler])
def test_random_workload_keeps_invariants_and_reproduces_outputs(kind):
    rng = random.Random(7)
    sched, kv = make(kind, num_blocks=16, max_num_seqs=6, max_num_batched_tokens=24, max_model_len=48)
    shared = [rng.randrange(500) for _ in range(12)]
    requests, aborted, preempted = [], set(), 0
    for t in range(400):
        if len(requests) < 40 and rng.random() < 0.5:
            prompt = shared[: rng.randrange(13)] + [rng.randrange(500) for _ in range(rng.randrange(1, 14))]
            r = req(f"q{len(requests)}", prompt, rng.randrange(1, 20), rng.randrange(3), float(t))
            requests.append(r)
            sched.add_request(r)
        if requests and rng.random() < 0.03:
            victim = rng.choice(requests)
            if not victim.status.finished:
                sched.finish(victim.request_id, RequestStatus.FINISHED_ABORTED)
                aborted.add(victim.request_id)
        preempted += len(step(sched, kv).preempted)
    while sched.has_unfinished():
        step(sched, kv)
    assert preempted > 0 and kv.prefix_cache_stats.hits > 0
    assert kv.num_free_blocks == kv.num_blocks
    for r in requests:
        if r.request_id not in aborted:
            assert r.status is RequestStatus.FINISHED_LENGTH and r.output_token_ids == expected_outputs(r)
