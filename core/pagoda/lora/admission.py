"""At most ``max_loras`` distinct adapters among a scheduler's running requests, so no step needs more.

Every step's requests are running requests, so the limit holds for each step once it holds for the running
list. :func:`limit_adapters` wraps the waiting queue of a :class:`~pagoda.scheduler.PolicyScheduler`
(whatever its policy): its head is the first waiting request, in the policy's order, whose adapter fits
(none, one a running request uses, or a new one while fewer than ``max_loras`` are in use). A request
passed over waits aside, ahead of the requests behind it, until its adapter fits, so requests of adapters
in use fill the batch while a request of another adapter waits for a slot to free up. (Under a policy
whose order can put a later arrival first, such as ``priority``, a request set aside goes before the
queue's requests once its adapter fits, whatever their order.)
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Callable

from pagoda.errors import ConfigError
from pagoda.interfaces.scheduler import Scheduler, WaitingQueue
from pagoda.lora_request import LoRARequest
from pagoda.request import Request
from pagoda.scheduler import PolicyScheduler
from pagoda.scheduler.virtual_engines import VirtualEngines

class AdapterFitQueue(WaitingQueue):
    """A waiting queue whose head is the first request (in ``inner``'s order) whose adapter fits.

    Requests whose adapter did not fit when they reached ``inner``'s head wait aside, in that order, one queue
    per adapter; each is looked at again whenever its adapter fits, ahead of ``inner``'s requests (it reached
    the head before them). A request is set aside at most once, so admission stays O(adapters) per request.
    """

    def __init__(self, inner: WaitingQueue, running_adapters: Callable[[], set[LoRARequest]], max_loras: int) -> None:
        self.inner = inner
        self.running_adapters = running_adapters
        self.max_loras = max_loras
        self._aside: dict[LoRARequest, deque[tuple[int, Request]]] = {}  # adapter -> (order, request), in order
        self._order = itertools.count()
        self._num_aside = 0
        self._peeked_aside: LoRARequest | None = None  # the adapter queue the last peek's request heads

    def __len__(self) -> int:
        return len(self.inner) + self._num_aside

    def push(self, request: Request) -> None:
        self.inner.push(request)

    def push_preempted(self, request: Request) -> None:
        self.inner.push_preempted(request)

    def peek(self) -> Request | None:
        in_use = self.running_adapters()
        fitting = [waiting[0] + (lora,) for lora, waiting in self._aside.items() if self._fits(lora, in_use)]
        self._peeked_aside = None
        if fitting:
            _, request, self._peeked_aside = min(fitting, key=lambda entry: entry[0])
            return request
        while (request := self.inner.peek()) is not None and not self._fits(request.lora_request, in_use):
            self._aside.setdefault(request.lora_request, deque()).append((next(self._order), self.inner.pop()))
            self._num_aside += 1
        return request

    def pop(self) -> Request:
        request = self.peek()
        if request is None:
            raise IndexError("no waiting request whose adapter fits")
        if self._peeked_aside is None:
            return self.inner.pop()
        waiting = self._aside[self._peeked_aside]
        waiting.popleft()
        self._forget_if_empty(self._peeked_aside)
        self._num_aside -= 1
        return request

    def discard(self, request: Request) -> None:
        waiting = self._aside.get(request.lora_request, ())
        for i, (_, aside) in enumerate(waiting):
            if aside is request:
                del waiting[i]
                self._forget_if_empty(request.lora_request)
                self._num_aside -= 1
                return
        self.inner.discard(request)

    def _fits(self, lora: LoRARequest | None, in_use: set[LoRARequest]) -> bool:
        return lora is None or lora in in_use or len(in_use) < self.max_loras

    def _forget_if_empty(self, lora: LoRARequest) -> None:
        if not self._aside[lora]:
            del self._aside[lora]


def limit_adapters(scheduler: Scheduler, max_loras: int) -> None:
    """Make ``scheduler`` (a new, empty PolicyScheduler, or pipeline parallelism's groups of them) keep at most
    ``max_loras`` adapters running (in each group: a step holds one group's requests)."""
    if isinstance(scheduler, VirtualEngines):
        for engine in scheduler.engines:
            limit_adapters(engine, max_loras)
        return
    if not isinstance(scheduler, PolicyScheduler):
        raise ConfigError(f"LoRA adapters need a scheduler built on pagoda.scheduler.PolicyScheduler (it keeps at "
                          f"most max_loras adapters per step); {type(scheduler).__name__} is not one")
    assert not scheduler.num_waiting and not scheduler.num_running, "wrap the scheduler before it has requests"
    running = scheduler.running  # the scheduler changes this list in place

    def running_adapters() -> set[LoRARequest]:
        return {req.lora_request for req in running if req.lora_request is not None}

    scheduler.waiting = AdapterFitQueue(scheduler.waiting, running_adapters, max_loras)
