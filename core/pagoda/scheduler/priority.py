"""Priority scheduler: FCFS mechanics, ordered by ``(priority, arrival_time)`` (lower first).

Waiting requests are admitted in that order, and the running list is kept in that order too,
so its end, the request preempted first when KV blocks run out, is the running request with
the largest ``(priority, arrival_time)``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools

from pagoda.request import Request
from pagoda.scheduler.fcfs import FcfsScheduler


def priority_key(request: Request) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


class PriorityWaitingQueue:
    """A heap of waiting requests by ``(priority, arrival_time)``; lazy removal like the FIFO queue."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._tiebreak = itertools.count()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, request: Request) -> None:
        heapq.heappush(self._heap, (*priority_key(request), next(self._tiebreak), request))
        self._size += 1

    def push_preempted(self, request: Request) -> None:
        self.push(request)  # its original key puts it ahead of later arrivals of equal priority

    def peek(self) -> Request | None:
        while self._heap and self._heap[0][-1].status.finished:
            heapq.heappop(self._heap)
        return self._heap[0][-1] if self._heap else None

    def pop(self) -> Request:
        request = self.peek()
        if request is None:
            raise IndexError("pop from an empty waiting queue")
        heapq.heappop(self._heap)
        self._size -= 1
        return request

    def discard(self, request: Request) -> None:
        """Count out a request that was just marked finished (its entry is dropped lazily)."""
        self._size -= 1


class PriorityScheduler(FcfsScheduler):
    """Admits by ``(priority, arrival_time)``; preempts the running request that is last by it."""

    description = "by request priority (lower first), then arrival; preempts the lowest priority"

    def _new_waiting_queue(self) -> PriorityWaitingQueue:
        return PriorityWaitingQueue()

    def _insert_running(self, request: Request) -> None:
        bisect.insort(self.running, request, key=priority_key)
