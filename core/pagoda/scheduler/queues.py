"""Ready-made waiting queues for a :class:`~pagoda.interfaces.scheduler.SchedulingPolicy`.

- :class:`FifoWaitingQueue`: arrival order; preempted requests go back to the front.
- :class:`KeyedWaitingQueue`: by ``key(request)``, smallest first (a heap); ties by push order.

Both remove lazily (the :class:`~pagoda.interfaces.scheduler.WaitingQueue` contract): a discarded
request, already marked finished, is counted out at once and dropped when it reaches the head.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from typing import Any, Callable

from pagoda.interfaces.scheduler import WaitingQueue
from pagoda.request import Request


class _LazyQueue(WaitingQueue):
    """Counts requests; ``pop`` and ``discard`` for subclasses that store them (``_drop_head``)."""

    def __init__(self) -> None:
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def pop(self) -> Request:
        request = self.peek()
        if request is None:
            raise IndexError("pop from an empty waiting queue")
        self._drop_head()
        self._size -= 1
        return request

    def discard(self, request: Request) -> None:
        self._size -= 1

    def _drop_head(self) -> None:
        raise NotImplementedError


class FifoWaitingQueue(_LazyQueue):
    """Waiting requests in arrival order; preempted ones go back to the front."""

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[Request] = deque()

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

    def _drop_head(self) -> None:
        self._queue.popleft()


class KeyedWaitingQueue(_LazyQueue):
    """Waiting requests by ``key(request)``, smallest first; equal keys in push order.

    The key is read once, when a request is pushed; a preempted request is pushed again with its
    key of that moment (so a key of fixed request fields, e.g. ``(priority, arrival_time)``, puts
    it back ahead of later arrivals that compare equal).
    """

    def __init__(self, key: Callable[[Request], Any]) -> None:
        super().__init__()
        self.key = key
        self._heap: list[tuple[Any, int, Request]] = []
        self._tiebreak = itertools.count()

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (self.key(request), next(self._tiebreak), request))
        self._size += 1

    def push_preempted(self, request: Request) -> None:
        self.push(request)

    def peek(self) -> Request | None:
        while self._heap and self._heap[0][-1].status.finished:
            heapq.heappop(self._heap)
        return self._heap[0][-1] if self._heap else None

    def _drop_head(self) -> None:
        heapq.heappop(self._heap)
