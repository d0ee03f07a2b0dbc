"""First-come-first-served scheduler with chunked prefill and recompute preemption.

Each step spends a token budget: first on running requests (decodes and unfinished chunked
prefills, in running order), then, if nothing had to be preempted, on admitting waiting
requests (after taking their prefix-cache hits). When KV blocks run out, the last running
request is preempted: its blocks are freed and it waits at the front to be recomputed.

Subclasses change the policy through two small pieces: the waiting queue
(:meth:`FcfsScheduler._new_waiting_queue`) and where a request goes in the running list
(:meth:`FcfsScheduler._insert_running`); the end of the running list is always the next victim.
"""

from __future__ import annotations

from collections import deque

from pagoda.kv_cache.manager import KVCacheManager
from pagoda.request import Request, RequestStatus
from pagoda.interfaces.scheduler import Scheduler, SchedulerConfig, SchedulerOutput


class FifoWaitingQueue:
    """Waiting requests in arrival order; preempted ones go back to the front.

    Removal (abort) is lazy: the request is counted out at once and its entry, now finished,
    is dropped when it reaches the head, so no call scans the queue.
    """

    def __init__(self) -> None:
        self._queue: deque[Request] = deque()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, request: Request) -> None:
        self._queue.append(request)
        self._size += 1

    def push_preempted(self, request: Request) -> None:
        self._queue.appendleft(request)
        self._size += 1

    def peek(self) -> Request | None:
        while self._queue and self._queue[0].status.finished:
            self._queue.popleft()
        return self._queue[0] if self._queue else None

    def pop(self) -> Request:
        request = self.peek()
        if request is None:
            raise IndexError("pop from an empty waiting queue")
        self._queue.popleft()
        self._size -= 1
        return request

    def discard(self, request: Request) -> None:
        """Count out a request that was just marked finished (its entry is dropped lazily)."""
        self._size -= 1


class FcfsScheduler(Scheduler):
    """Serves requests in arrival order; preempts the most recently admitted when KV runs out."""

    description = "first come, first served; chunked prefill; preempts the newest request"

    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager) -> None:
        super().__init__(config, kv_cache)
        if not config.enable_chunked_prefill and config.max_num_batched_tokens < config.max_model_len:
            raise ValueError(
                "without chunked prefill, max_num_batched_tokens "
                f"({config.max_num_batched_tokens}) must be >= max_model_len ({config.max_model_len})"
            )
        self.waiting = self._new_waiting_queue()
        self.running: list[Request] = []  # the end is the next preemption victim
        self._requests: dict[str, Request] = {}  # unfinished requests by id

    # -- policy hooks ----------------------------------------------------------------------

    def _new_waiting_queue(self) -> FifoWaitingQueue:
        return FifoWaitingQueue()

    def _insert_running(self, request: Request) -> None:
        """Add a newly admitted request to the running list (FCFS: at the end)."""
        self.running.append(request)

    # -- the Scheduler contract ------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

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
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted:
            self._schedule_waiting(out, budget)
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
        self._insert_running(child)

    def finish(self, request_id: str, status: RequestStatus) -> None:
        if not status.finished:
            raise ValueError(f"finish() needs a finished status, got {status}")
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        was_running = request.status is RequestStatus.RUNNING
        request.status = status
        if was_running:
            self.running.remove(request)  # O(batch)
        else:
            self.waiting.discard(request)
        self.kv_cache.free(request)

    # -- one step --------------------------------------------------------------------------

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        """Schedule running requests in order, preempting from the end when blocks run out."""
        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            n = self._num_tokens_to_schedule(request, budget)
            if n <= 0:
                i += 1
                continue
            if not self._allocate_or_preempt(request, n, out):
                break  # the request itself was preempted: everything after it is gone too
            out.requests.append(request)
            out.num_tokens.append(n)
            budget -= n
            i += 1
        return budget

    def _allocate_or_preempt(self, request: Request, n: int, out: SchedulerOutput) -> bool:
        """Allocate for ``request``, preempting the running list's end until it fits or is the victim."""
        while not self.kv_cache.allocate_slots(request, n):
            victim = self.running.pop()
            self._preempt(victim)
            out.preempted.append(victim)
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request) -> None:
        self.kv_cache.free(request)
        request.num_computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        request.num_preemptions += 1
        self.waiting.push_preempted(request)

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        """Admit waiting requests in queue order until the budget, seats or blocks run out."""
        while budget > 0 and len(self.running) < self.config.max_num_seqs:
            request = self.waiting.peek()
            if request is None:
                return
            hits, num_hit_tokens = self.kv_cache.get_computed_blocks(request)
            remaining = request.num_tokens - num_hit_tokens
            n = min(remaining, budget, self.config.max_model_len - num_hit_tokens)
            if n <= 0 or (n < remaining and not self.config.enable_chunked_prefill):
                return
            if not self.kv_cache.allocate_slots(request, n, hits):
                return  # head-of-line: later requests wait too, keeping arrival order
            self.waiting.pop()
            self._admit(request, num_hit_tokens)
            out.requests.append(request)
            out.num_tokens.append(n)
            budget -= n

    def _admit(self, request: Request, num_hit_tokens: int) -> None:
        request.num_computed_tokens = num_hit_tokens
        if request.num_preemptions == 0:
            request.num_cached_tokens = num_hit_tokens
        request.status = RequestStatus.RUNNING
        self._insert_running(request)

    def _num_tokens_to_schedule(self, request: Request, budget: int) -> int:
        done = request.num_computed_tokens
        return min(request.num_tokens - done, budget, self.config.max_model_len - done)


def _is_decode(request: Request, n: int) -> bool:
    return n == 1 and request.num_computed_tokens + 1 == request.num_tokens


def _decodes_first(out: SchedulerOutput) -> SchedulerOutput:
    """Reorder ``out`` so one-token decodes come before prefills (stable within each group)."""
    pairs = list(zip(out.requests, out.num_tokens))
    ordered = [p for p in pairs if _is_decode(*p)] + [p for p in pairs if not _is_decode(*p)]
    out.requests = [r for r, _ in ordered]
    out.num_tokens = [n for _, n in ordered]
    return out
