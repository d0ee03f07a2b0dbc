"""Scheduler: decides, each step, which requests run and how many tokens each computes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pagoda.interfaces.base import Capability

if TYPE_CHECKING:
    from pagoda.kv_cache.manager import KVCacheManager
    from pagoda.request import Request, RequestStatus


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True


@dataclass
class SchedulerOutput:
    """The only contract between scheduling and execution.

    ``requests[i]`` computes ``num_tokens[i]`` tokens starting at its ``num_computed_tokens``.
    Decodes (one token, all earlier tokens computed) come first, then prefills.
    """

    requests: list["Request"] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    preempted: list["Request"] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)

    def is_empty(self) -> bool:
        return not self.requests


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

    @property
    @abstractmethod
    def num_waiting(self) -> int: ...

    @property
    @abstractmethod
    def num_running(self) -> int: ...

    def has_unfinished(self) -> bool:
        return self.num_waiting + self.num_running > 0
