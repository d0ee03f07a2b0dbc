"""Built-in schedulers: ``fcfs`` (first come, first served) and ``priority``, two policies on
:class:`PolicyScheduler` (the mechanics a plugin scheduler reuses with its own policy)."""

from pagoda.scheduler.fcfs import FcfsPolicy, FcfsScheduler
from pagoda.scheduler.policy_scheduler import PolicyScheduler
from pagoda.scheduler.priority import PriorityPolicy, PriorityScheduler
from pagoda.scheduler.queues import FifoWaitingQueue, KeyedWaitingQueue

__all__ = [
    "FcfsPolicy",
    "FcfsScheduler",
    "FifoWaitingQueue",
    "KeyedWaitingQueue",
    "PolicyScheduler",
    "PriorityPolicy",
    "PriorityScheduler",
]
