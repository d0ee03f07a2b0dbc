"""Built-in schedulers: ``fcfs`` (first come, first served) and ``priority``."""

from pagoda.scheduler.fcfs import FcfsScheduler
from pagoda.scheduler.priority import PriorityScheduler

__all__ = ["FcfsScheduler", "PriorityScheduler"]
