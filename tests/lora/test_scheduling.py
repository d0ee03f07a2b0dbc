"""The scheduler never runs more distinct adapters than max_loras: requests of adapters in use (and of the base
model) are admitted past a request whose adapter has no slot, which runs once a slot frees up; under the FCFS
and priority schedulers, with aborts of passed-over requests. The prefix cache keys blocks by adapter."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from pagoda.interfaces.scheduler import SchedulerConfig
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.lora.admission import limit_adapters
from pagoda.lora_request import LoRARequest
from pagoda.request import Request, RequestStatus
from pagoda.scheduler import FcfsScheduler, PriorityScheduler

ADAPTERS = {name: LoRARequest(name, i + 1, f"/adapters/{name}") for i, name in enumerate("ABCD")}


def _scheduler(kind=FcfsScheduler, max_loras: int = 2, **config):
    kv = KVCacheManager(256, 4)
    sched = kind(SchedulerConfig(**{"max_model_len": 64, **config}), kv)
    limit_adapters(sched, max_loras)
    return sched


def _request(rid: str, adapter: str | None, priority: int = 0, tokens: int = 3) -> Request:
    return Request(rid, list(range(10, 10 + 6)), SimpleNamespace(max_tokens=tokens), priority=priority,
                   arrival_time=float(len(rid)) + int(rid[1:] or 0), lora_request=ADAPTERS.get(adapter))


def _step(sched) -> list[Request]:
    """Schedule, "sample" a token for every request at its end, finish those at max_tokens."""
    out = sched.schedule()
    sched.update_from_output(out, {r.request_id: 7 for r, n in zip(out.requests, out.num_tokens)
                                   if r.num_computed_tokens + n == r.num_tokens})
    for r in out.requests:
        if r.num_output_tokens >= r.sampling_params.max_tokens:
            sched.finish(r.request_id, RequestStatus.FINISHED_LENGTH)
    return out.requests


def _adapters(requests) -> set:
    return {r.lora_request for r in requests if r.lora_request is not None}


def test_requests_of_adapters_in_use_pass_a_request_that_has_no_slot():
    sched = _scheduler(max_loras=2)
    for i, adapter in enumerate(["A", "B", "C", "A", None, "B", "C"]):
        sched.add_request(_request(f"r{i}", adapter))
    first = _step(sched)
    assert [r.request_id for r in first] == ["r0", "r1", "r3", "r4", "r5"]  # C's two requests wait
    assert sched.num_waiting == 2
    seen = [first]
    while sched.has_unfinished():
        seen.append(_step(sched))
    assert all(len(_adapters(step)) <= 2 for step in seen)
    assert {r.request_id for step in seen for r in step} == {f"r{i}" for i in range(7)}


def test_requests_set_aside_run_in_their_order_once_their_adapter_fits():
    """One slot: A's requests run first; B's, set aside in arrival order, run next, ahead of a later C."""
    sched = _scheduler(max_loras=1, max_num_seqs=2)
    for i, adapter in enumerate(["A", "B", "A", "B", "B"]):
        sched.add_request(_request(f"r{i}", adapter, tokens=2))
    order, late = [], []
    while sched.has_unfinished():
        for r in _step(sched):
            if r.request_id not in order:
                order.append(r.request_id)
        if len(order) >= 3 and not late:  # B runs now: a C request arrives behind B's waiting one
            late.append(sched.add_request(_request("r5", "C", tokens=2)))
    assert order == ["r0", "r2", "r1", "r3", "r4", "r5"]


@pytest.mark.parametrize("kind", [FcfsScheduler, PriorityScheduler])
def test_random_workload_never_exceeds_the_slots(kind):
    rng = random.Random(3)
    sched = _scheduler(kind, max_loras=2, max_num_seqs=6, max_num_batched_tokens=20)
    pending = [_request(f"r{i}", rng.choice([*ADAPTERS, None]), priority=rng.randint(0, 2),
                        tokens=rng.randint(1, 6)) for i in range(60)]
    finished = 0
    for step in range(400):
        for _ in range(rng.randint(0, 2)):
            if pending:
                sched.add_request(pending.pop(0))
        if step % 7 == 3 and sched.num_waiting:  # abort a waiting request, passed over or not
            victim = next(r for r in sched._requests.values() if r.status is RequestStatus.WAITING)
            sched.finish(victim.request_id, RequestStatus.FINISHED_ABORTED)
        running = _step(sched)
        assert len(_adapters(running)) <= 2 and len(_adapters(sched.running)) <= 2
        finished = step
        if not pending and not sched.has_unfinished():
            break
    assert not pending and not sched.has_unfinished(), f"stuck after {finished} steps"
    assert sched.num_waiting == 0


def test_prefix_cache_keys_blocks_by_adapter():
    """The same prompt under another adapter, or the base model, finds no cached blocks; under its own it does."""
    kv = KVCacheManager(64, 4)
    prompt = list(range(100, 113))  # 3 full blocks of 4 and one token
    first = Request("first", prompt, SimpleNamespace(max_tokens=1), lora_request=ADAPTERS["A"])
    hits, _ = kv.get_computed_blocks(first)
    assert kv.allocate_slots(first, len(prompt), hits)
    for lora, expected in ((ADAPTERS["A"], 12), (ADAPTERS["B"], 0), (None, 0)):
        other = Request(f"other-{lora}", prompt, SimpleNamespace(max_tokens=1), lora_request=lora)
        assert kv.get_computed_blocks(other)[1] == expected, lora


def test_only_policy_schedulers_take_the_limit():
    from pagoda.errors import ConfigError
    from pagoda.interfaces.scheduler import Scheduler

    class Plain(Scheduler):
        add_request = schedule = update_from_output = finish = lambda *a: None
        num_waiting = num_running = 0

    with pytest.raises(ConfigError, match="PolicyScheduler"):
        limit_adapters(Plain(SchedulerConfig(), KVCacheManager(4, 4)), 2)
