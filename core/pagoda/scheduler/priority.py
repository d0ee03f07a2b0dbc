"""Priority scheduler: FCFS mechanics, ordered by ``(priority, arrival_time)`` (lower first).

Waiting requests are admitted in that order, and the running list is kept in that order too,
so its end, the request preempted first when KV blocks run out, is the running request with
the largest ``(priority, arrival_time)``.
"""

from __future__ import annotations

import bisect

from pagoda.interfaces.scheduler import SchedulingPolicy
from pagoda.request import Request
from pagoda.scheduler.policy_scheduler import PolicyScheduler
from pagoda.scheduler.queues import KeyedWaitingQueue


def priority_key(request: Request) -> tuple[int, float]:
    return (request.priority, request.arrival_time)


class PriorityPolicy(SchedulingPolicy):
    """Admits by ``(priority, arrival_time)``; keeps the running list in that order (its end is the victim)."""

    description = "by request priority (lower first), then arrival; preempts the lowest priority"

    def new_waiting_queue(self) -> KeyedWaitingQueue:
        return KeyedWaitingQueue(priority_key)

    def insert_running(self, running: list[Request], request: Request) -> None:
        bisect.insort(running, request, key=priority_key)


class PriorityScheduler(PolicyScheduler):
    """Admits by ``(priority, arrival_time)``; preempts the running request that is last by it."""

    description = "by request priority (lower first), then arrival; preempts the lowest priority"
    policy_class = PriorityPolicy
