"""The scheduler mechanics every built-in scheduler shares, around a :class:`SchedulingPolicy`.

Each step spends a token budget: first on running requests (decodes and unfinished chunked
prefills, in running order), then, if nothing had to be preempted, on admitting waiting
requests (after taking their prefix-cache hits). When KV blocks run out, the policy's victim
is preempted: its blocks are freed and it waits to be recomputed. With a KV connector attached
(``attach_kv_connector``), a waiting request whose next blocks the connector supplies waits for them
beside the queue (:mod:`pagoda.scheduler.kv_loads`); without one nothing here changes. The prefills of a
step are bounded by the latency limits of :mod:`pagoda.scheduler.prefill_limits` (how many prompts may be
split over steps at once, a per-step chunk for long prompts, prompt tokens beside decodes).

A plugin scheduler subclasses :class:`PolicyScheduler` and names its policy::

    class ShortestFirstScheduler(PolicyScheduler):
        description = "shortest prompt first"
        policy_class = ShortestFirstPolicy
"""

from __future__ import annotations

from typing import ClassVar

from pagoda.interfaces.kv_connector import KVConnector
from pagoda.interfaces.scheduler import Scheduler, SchedulerConfig, SchedulerOutput, SchedulingPolicy
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.request import Request, RequestStatus
from pagoda.scheduler.kv_loads import KVLoads
from pagoda.scheduler.prefill_limits import StepPrefills, tokens_to_compute
from pagoda.scheduler.queues import FifoWaitingQueue

MAX_STEPPED_ASIDE = 64  # long prompts a step looks past (waiting for a long-prefill seat) to admit shorter ones


class FcfsPolicy(SchedulingPolicy):
    """Arrival order; preempted requests first; the most recently admitted is preempted first."""

    description = "first come, first served; preempts the newest request"

    def new_waiting_queue(self) -> FifoWaitingQueue:
        return FifoWaitingQueue()


class PolicyScheduler(Scheduler):
    """Chunked prefill, prefix-cache hits and recompute preemption; the choices are ``policy_class``'s."""

    policy_class: ClassVar[type[SchedulingPolicy]] = FcfsPolicy

    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager) -> None:
        super().__init__(config, kv_cache)
        if not config.enable_chunked_prefill and config.max_num_batched_tokens < config.max_model_len:
            raise ValueError(
                "without chunked prefill, max_num_batched_tokens "
                f"({config.max_num_batched_tokens}) must be >= max_model_len ({config.max_model_len})"
            )
        self.policy = self.policy_class(config)
        self.waiting = self.policy.new_waiting_queue()
        self.running: list[Request] = []  # scheduled in this order each step
        self._requests: dict[str, Request] = {}  # unfinished requests by id
        self.kv_loads: KVLoads | None = None  # with a KV connector: the requests loading its blocks

    # -- the Scheduler contract ------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self.waiting) + (self.kv_loads.num_loading if self.kv_loads is not None else 0)

    @property
    def num_running(self) -> int:
        return len(self.running)

    def get_request(self, request_id: str) -> Request | None:
        return self._requests.get(request_id)

    def add_request(self, request: Request) -> None:
        if request.request_id in self._requests:
            raise ValueError(f"request id {request.request_id!r} is already queued or running")
        request.status = RequestStatus.WAITING
        self._requests[request.request_id] = request
        self.waiting.push(request)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        prefills = StepPrefills(self.config, self.running)
        budget = self._schedule_running(out, self.config.max_num_batched_tokens, prefills)
        if not out.preempted:
            self._schedule_waiting(out, budget, prefills)
        if self.kv_loads is not None:
            out.kv_transfers = self.kv_loads.plan()
        return _decodes_first(out)

    def update_from_output(self, output: SchedulerOutput, sampled: dict[str, int]) -> None:
        for request, n in zip(output.requests, output.num_tokens):
            if request.status is not RequestStatus.RUNNING:
                continue  # finished or aborted since it was scheduled
            request.num_computed_tokens += n
            token = sampled.get(request.request_id)
            if token is not None:
                request.append_token(token)

    def fork(self, parent: Request, child: Request) -> None:
        if parent.status is not RequestStatus.RUNNING or child.request_id in self._requests:
            raise ValueError(f"cannot fork {parent.request_id!r} ({parent.status.value}) into {child.request_id!r}")
        child.num_computed_tokens = self.kv_cache.fork(parent, child)
        child.status = RequestStatus.RUNNING
        self._requests[child.request_id] = child
        self.policy.insert_running(self.running, child)

    def attach_kv_connector(self, connector: KVConnector) -> None:
        self.kv_loads = KVLoads(connector, self.kv_cache)

    def kv_loads_finished(self, loaded: dict[str, int]) -> None:
        for request, num_computed in self.kv_loads.finished(loaded):
            self._admit(request, num_computed)

    def finish(self, request_id: str, status: RequestStatus) -> None:
        if not status.finished:
            raise ValueError(f"finish() needs a finished status, got {status}")
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        was_running = request.status is RequestStatus.RUNNING
        request.status = status
        if self.kv_loads is not None:
            self.kv_loads.forget(request_id)
            if not was_running and self.kv_loads.abort(request):
                return  # loading: its blocks go back when the loads end
        if was_running:
            self.running.remove(request)  # O(batch)
        else:
            self.waiting.discard(request)
        self.kv_cache.free(request)

    # -- one step --------------------------------------------------------------------------

    def _schedule_running(self, out: SchedulerOutput, budget: int, prefills: StepPrefills) -> int:
        """Schedule running requests in order, preempting the policy's victims when blocks run out."""
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            remaining = tokens_to_compute(request)
            prefilling = remaining > 1  # decodes (most of a batch) skip the prefill limits' calls
            n = self._num_tokens_to_schedule(request, prefills.cap(remaining, budget) if prefilling else budget)
            if n <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(i, n, out):
                continue  # running[i] itself was preempted: the next request moved into its place
            out.requests.append(request)
            out.num_tokens.append(n)
            if prefilling:
                prefills.scheduled_running(remaining, n)
            budget -= n
            i += 1
        return budget

    def _allocate_or_preempt(self, i: int, n: int, out: SchedulerOutput) -> bool:
        """Allocate ``n`` tokens for ``running[i]``, preempting victims until it fits or is the victim."""
        request = self.running[i]
        while not self.kv_cache.allocate_slots(request, n):
            victim = self._victim(i)
            self._preempt(victim)
            out.preempted.append(victim)
            if victim is request:
                return False
        return True

    def _victim(self, i: int) -> Request:
        """The policy's victim among ``running[i:]``, removed from the running list."""
        candidates = self.running[i:]
        victim = self.policy.preemption_victim(candidates)
        if victim is candidates[-1]:
            return self.running.pop()
        if not any(victim is c for c in candidates):
            raise RuntimeError(
                f"{type(self.policy).__name__}.preemption_victim returned a request that is not among its "
                "candidates (the running requests not yet scheduled this step); return one of them"
            )
        self.running.remove(victim)
        return victim

    def _preempt(self, request: Request) -> None:
        self.kv_cache.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.waiting.push_preempted(request)

    def _schedule_waiting(self, out: SchedulerOutput, budget: int, prefills: StepPrefills) -> None:
        """Admit waiting requests in queue order until the budget, seats or blocks run out. A long prompt that
        must wait for a long-prefill seat steps aside for the shorter ones behind it, and keeps its place."""
        aside: list[Request] = []
        try:
            self._admit_waiting(out, budget, prefills, aside)
        finally:
            for request in reversed(aside):
                self.waiting.push_preempted(request)  # back at the head, in their order

    def _admit_waiting(self, out: SchedulerOutput, budget: int, prefills: StepPrefills, aside: list[Request]) -> None:
        loading = self.kv_loads.loading if self.kv_loads is not None else ()
        while budget > 0 and len(self.running) + len(loading) < self.config.max_num_seqs:
            request = self.waiting.peek()
            if request is None or not self.policy.may_admit(request, self.running):
                return
            hits, num_hit_tokens = self.kv_cache.get_computed_blocks(request)
            if self.kv_loads is not None and self.kv_loads.start(request, hits, num_hit_tokens):
                self.waiting.pop()  # it waits for its blocks beside the queue, holding a seat
                continue
            remaining = request.num_tokens - num_hit_tokens
            n = self._first_chunk(request, num_hit_tokens, prefills.cap(remaining, budget))
            if n <= 0 or (n < remaining and not self.config.enable_chunked_prefill):
                return
            if not prefills.allows(remaining, n):
                if not prefills.is_long(remaining) or len(aside) >= MAX_STEPPED_ASIDE:
                    return
                aside.append(self.waiting.pop())
                continue
            if not self.kv_cache.allocate_slots(request, n, hits):
                return  # head-of-line: later requests wait too, keeping the queue's order
            self.waiting.pop()
            self._admit(request, num_hit_tokens)
            out.requests.append(request)
            out.num_tokens.append(n)
            prefills.admitted(remaining, n)
            budget -= n

    def _first_chunk(self, request: Request, num_hit_tokens: int, limit: int) -> int:
        n = min(request.num_tokens - num_hit_tokens, limit, self.config.max_model_len - num_hit_tokens)
        return request.chunk_size(num_hit_tokens, n, self.config.max_num_batched_tokens)  # images kept whole

    def _admit(self, request: Request, num_hit_tokens: int) -> None:
        request.num_computed_tokens = num_hit_tokens
        if request.num_preemptions == 0:
            request.num_cached_tokens = num_hit_tokens
        request.status = RequestStatus.RUNNING
        self.policy.insert_running(self.running, request)

    def _num_tokens_to_schedule(self, request: Request, budget: int) -> int:
        done = request.num_computed_tokens
        n = min(request.num_tokens - done, budget, self.config.max_model_len - done)
        return request.chunk_size(done, n, self.config.max_num_batched_tokens)  # images kept whole


def _is_decode(request: Request, n: int) -> bool:
    return n == 1 and request.num_computed_tokens + 1 == request.num_tokens


def _decodes_first(out: SchedulerOutput) -> SchedulerOutput:
    """Reorder ``out`` so one-token decodes come before prefills (stable within each group)."""
    pairs = list(zip(out.requests, out.num_tokens))
    ordered = [p for p in pairs if _is_decode(*p)] + [p for p in pairs if not _is_decode(*p)]
    out.requests = [r for r, _ in ordered]
    out.num_tokens = [n for _, n in ordered]
    return out
