"""First-come-first-served scheduler: :class:`PolicyScheduler` with :class:`FcfsPolicy`.

Requests are admitted in arrival order (preempted ones first, to be recomputed), run in the
order they were admitted, and the most recently admitted is preempted first when KV blocks run out.
"""

from __future__ import annotations

from pagoda.scheduler.policy_scheduler import FcfsPolicy, PolicyScheduler
from pagoda.scheduler.queues import FifoWaitingQueue

__all__ = ["FcfsPolicy", "FcfsScheduler", "FifoWaitingQueue"]


class FcfsScheduler(PolicyScheduler):
    """Serves requests in arrival order; preempts the most recently admitted when KV runs out."""

    description = "first come, first served; chunked prefill; preempts the newest request"
    policy_class = FcfsPolicy
