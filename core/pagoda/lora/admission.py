"""At most ``max_loras`` distinct adapters among a scheduler's running requests, so no step needs more.

Every step's requests are running requests, so the limit holds for each step once it holds for the running
list. :func:`limit_adapters` wraps the waiting queue of a :class:`~pagoda.scheduler.PolicyScheduler`
(whatever its policy): its head is the first waiting request, in the policy's order, whose adapter fits
(none, one a running request uses, or a new one while fewer than ``max_loras`` are in use). The requests
passed over keep their places and are looked at again at the next admission, so requests of adapters in
use fill the batch while a request of another adapter waits for a slot to free up.
"""

from __future__ import annotations

from typing import Callable

from pagoda.errors import ConfigError
from pagoda.interfaces.scheduler import Scheduler, WaitingQueue
from pagoda.lora_request import LoRARequest
from pagoda.request import Request
from pagoda.scheduler import PolicyScheduler

LOOKAHEAD = 256  # waiting requests looked at past the head for one whose adapter fits


class AdapterFitQueue(WaitingQueue):
    """A waiting queue whose head is the first request (in ``inner``'s order) whose adapter fits."""

    def __init__(self, inner: WaitingQueue, running_adapters: Callable[[], set[LoRARequest]], max_loras: int) -> None:
        self.inner = inner
        self.running_adapters = running_adapters
        self.max_loras = max_loras
        self._passed: list[Request] = []  # taken off inner's head by the last peek, in order

    def __len__(self) -> int:
        return len(self.inner) + len(self._passed)

    def push(self, request: Request) -> None:
        self.inner.push(request)

    def push_preempted(self, request: Request) -> None:
        self.inner.push_preempted(request)

    def peek(self) -> Request | None:
        self._restore()
        in_use = self.running_adapters()
        for _ in range(LOOKAHEAD):
            request = self.inner.peek()
            if request is None or self._fits(request, in_use):
                return request
            self._passed.append(self.inner.pop())
        return None

    def pop(self) -> Request:
        request = self.peek()
        if request is None:
            raise IndexError("no waiting request whose adapter fits")
        return self.inner.pop()

    def discard(self, request: Request) -> None:
        for i, passed in enumerate(self._passed):
            if passed is request:
                del self._passed[i]
                return
        self.inner.discard(request)

    def _fits(self, request: Request, in_use: set[LoRARequest]) -> bool:
        lora = request.lora_request
        return lora is None or lora in in_use or len(in_use) < self.max_loras

    def _restore(self) -> None:
        """Put the requests passed over back in front of ``inner``, in their order."""
        for request in reversed(self._passed):
            self.inner.push_preempted(request)
        self._passed.clear()


def limit_adapters(scheduler: Scheduler, max_loras: int) -> None:
    """Make ``scheduler`` (a new, empty PolicyScheduler) keep at most ``max_loras`` adapters running."""
    if not isinstance(scheduler, PolicyScheduler):
        raise ConfigError(f"LoRA adapters need a scheduler built on pagoda.scheduler.PolicyScheduler (it keeps at "
                          f"most max_loras adapters per step); {type(scheduler).__name__} is not one")
    assert not scheduler.num_waiting and not scheduler.num_running, "wrap the scheduler before it has requests"
    running = scheduler.running  # the scheduler changes this list in place

    def running_adapters() -> set[LoRARequest]:
        return {req.lora_request for req in running if req.lora_request is not None}

    scheduler.waiting = AdapterFitQueue(scheduler.waiting, running_adapters, max_loras)
