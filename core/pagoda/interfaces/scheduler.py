"""Scheduler: decides, each step, which requests run and how many tokens each computes.

Two levels of contract:

- :class:`Scheduler`, the whole scheduler (queues, token budget, KV allocation, preemption).
- :class:`SchedulingPolicy`, only the choices: the order waiting requests are admitted in
  (a :class:`WaitingQueue`), whether the next one may be admitted now, where an admitted request
  goes in the running list, and which running request is preempted when KV blocks run out.
  ``pagoda.scheduler.PolicyScheduler`` supplies the mechanics (chunked prefill, prefix-cache hits,
  recompute preemption) around a policy; the built-in ``fcfs`` and ``priority`` schedulers are
  two policies on it, and a plugin scheduler is usually one more.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Sequence

from pagoda.interfaces.base import Capability

if TYPE_CHECKING:
    from pagoda.interfaces.kv_connector import KVConnector, KVTransferPlan
    from pagoda.kv_cache.manager import KVCacheManager
    from pagoda.request import Request, RequestStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True
    # latency limits on prefills (pagoda.scheduler.prefill_limits; 0: off)
    max_num_partial_prefills: int = 1  # prompts split over steps at once
    max_long_partial_prefills: int = 1  # of them, prompts longer than long_prefill_token_threshold
    long_prefill_token_threshold: int = 0  # a longer prompt computes at most this many tokens a step
    max_prefill_tokens_while_decoding: int = 0  # prompt tokens of a step that also runs decodes


@dataclass
class SchedulerOutput:
    """The only contract between scheduling and execution.

    ``requests[i]`` computes ``num_tokens[i]`` tokens starting at its ``num_computed_tokens``.
    Decodes (one token, all earlier tokens computed) come first, then prefills.
    """

    requests: list["Request"] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    preempted: list["Request"] = field(default_factory=list)
    kv_transfers: "KVTransferPlan | None" = None  # with a KV connector: blocks to load and save (a step of its own)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)

    def is_empty(self) -> bool:
        return not self.requests and self.kv_transfers is None


class Scheduler(Capability, ABC):
    """Owns the waiting and running queues; allocates KV blocks through the cache manager.

    The engine calls ``add_request``, then each step ``schedule()``, runs the model, and calls
    ``update_from_output`` with the tokens sampled per request, then ``finish`` for requests that
    met a stop condition. ``finish`` and preemption must free the request's KV blocks.
    """

    def __init__(self, config: SchedulerConfig, kv_cache: "KVCacheManager") -> None:
        self.config = config
        self.kv_cache = kv_cache

    @abstractmethod
    def add_request(self, request: "Request") -> None:
        """Queue a new request."""

    @abstractmethod
    def schedule(self) -> SchedulerOutput:
        """Pick this step's requests within the token budget and KV space."""

    @abstractmethod
    def update_from_output(self, output: SchedulerOutput, sampled: dict[str, int]) -> None:
        """Advance computed tokens; append each request's sampled token (if it sampled) with
        ``Request.append_token``: with overlapped steps the token is ``PLACEHOLDER`` until the
        engine core reads it (it then fills it in with ``Request.resolve_placeholder``)."""

    @abstractmethod
    def finish(self, request_id: str, status: "RequestStatus") -> None:
        """Remove a request (stopped, length, aborted) and free its KV blocks."""

    def fork(self, parent: "Request", child: "Request") -> None:
        """Add ``child``, a running copy of the running ``parent`` plus new tokens (a beam of beam
        search), sharing the parent's full computed KV blocks (``KVCacheManager.fork``). Optional:
        schedulers that do not override it cannot run beam search."""
        raise NotImplementedError(f"the {type(self).__name__} scheduler cannot fork sequences (beam search)")

    def fork_refusal(self) -> str | None:
        """Why :meth:`fork` cannot run here (None: it can)."""
        if type(self).fork is Scheduler.fork:
            return f"the {type(self).__name__} scheduler cannot fork them; use the fcfs or priority scheduler"
        return None

    def attach_kv_connector(self, connector: "KVConnector") -> None:
        """Admit prompts with blocks ``connector`` supplies beyond the prefix cache (they wait, holding their
        blocks, until every rank loaded them) and put the blocks to load and save in each
        ``SchedulerOutput.kv_transfers``. Optional: without it the engine refuses KV connectors."""
        raise NotImplementedError(f"the {type(self).__name__} scheduler cannot run with a KV connector; use a "
                                  "scheduler built on pagoda.scheduler.PolicyScheduler (fcfs, priority)")

    def kv_loads_finished(self, loaded: dict[str, int]) -> None:
        """Requests whose loads ended on every rank, with the blocks loaded (from the first; fewer than planned:
        the rest is recomputed): they join the running requests (called between steps)."""

    @property
    @abstractmethod
    def num_waiting(self) -> int: ...

    @property
    @abstractmethod
    def num_running(self) -> int: ...

    def has_unfinished(self) -> bool:
        return self.num_waiting + self.num_running > 0


class WaitingQueue(ABC):
    """The waiting requests of a scheduler, in the order they are admitted (head first).

    The scheduler pushes new requests with :meth:`push` and preempted ones (to be recomputed)
    with :meth:`push_preempted`, looks at the head with :meth:`peek` and admits it with
    :meth:`pop`. An aborted request is first marked finished, then :meth:`discard`-ed: the
    queue may count it out at once and drop its entry when it reaches the head (``peek`` skips
    requests whose ``status.finished``), so no call has to scan the queue.
    """

    @abstractmethod
    def __len__(self) -> int:
        """Waiting requests, discarded ones not counted."""

    @abstractmethod
    def push(self, request: "Request") -> None:
        """Queue a new request."""

    @abstractmethod
    def push_preempted(self, request: "Request") -> None:
        """Queue a request just preempted from the running list."""

    @abstractmethod
    def peek(self) -> "Request | None":
        """The next request to admit (never a finished one), or ``None`` when none waits."""

    @abstractmethod
    def pop(self) -> "Request":
        """Remove and return :meth:`peek`'s request (``IndexError`` when none waits)."""

    @abstractmethod
    def discard(self, request: "Request") -> None:
        """Count out ``request``, already marked finished (aborted while waiting)."""


class SchedulingPolicy(ABC):
    """The choices of ``pagoda.scheduler.PolicyScheduler``: ordering, admission and preemption.

    One instance per scheduler. The scheduler keeps a ``running`` list: each step it gives
    tokens to running requests in that list's order, then admits waiting requests from the head
    of :meth:`new_waiting_queue`'s queue while the token budget, ``max_num_seqs`` and free KV
    blocks allow and :meth:`may_admit` agrees. Admission is head-of-line: when the head cannot be
    admitted, no later request is admitted that step. Requests only read here: the scheduler
    changes their state.
    """

    description: ClassVar[str] = ""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config

    @abstractmethod
    def new_waiting_queue(self) -> WaitingQueue:
        """The waiting queue, whose order is the admission order (``pagoda.scheduler.queues`` has a
        FIFO queue and a queue ordered by a key of each request)."""

    def insert_running(self, running: list["Request"], request: "Request") -> None:
        """Put a newly admitted (or forked) ``request`` into ``running`` (default: at the end)."""
        running.append(request)

    def may_admit(self, request: "Request", running: Sequence["Request"]) -> bool:
        """Whether the queue's head ``request`` may be admitted now, beyond the token budget,
        ``max_num_seqs`` and free KV blocks that the scheduler checks itself (default: yes).
        ``False`` keeps it, and every request behind it, waiting until the next step."""
        return True

    def preemption_victim(self, candidates: Sequence["Request"]) -> "Request":
        """The running request to preempt when KV blocks run out (default: the last one).

        ``candidates`` are the running requests not yet given tokens this step, in running order;
        ``candidates[0]`` is the one that needs blocks (choosing it preempts it). The victim's
        blocks are freed and it goes back to the waiting queue (:meth:`WaitingQueue.push_preempted`)
        to be recomputed; victims are chosen until the request's blocks fit.
        """
        return candidates[-1]
