"""Stored responses (``store``, the default): what ``GET /v1/responses/{id}`` answers and what
``previous_response_id`` continues, plus the running task of a ``background`` response.

Bounded and expiring: at most ``max_entries`` (``--responses-store-size``) finished responses are kept,
the oldest dropped first, and each is dropped ``ttl_s`` seconds (``--responses-store-ttl``) after it
finished. The store lives in the API server process: with ``--api-server-count`` > 1 a follow-up may
reach a process that does not hold the response (a 404 that says so).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Optional

from pagoda.server.errors import APIError

DEFAULT_MAX_ENTRIES = 1000
DEFAULT_TTL_S = 3600.0


@dataclass
class StoredResponse:
    response: dict  # the response object as last answered (updated while a background one runs)
    conversation: list[dict]  # its chat messages, this response's output included (instructions left out)
    input_items: list[dict] = field(default_factory=list)  # its request's input, as items
    task: Optional[asyncio.Task] = None  # a background response still running
    expires_at: float = math.inf  # set when it finishes

    @property
    def running(self) -> bool:
        return self.response["status"] in ("queued", "in_progress")


class ResponseStore:
    """Responses by id, bounded in count and expiring (``max_entries`` 0: nothing is stored)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES, ttl_s: float = DEFAULT_TTL_S,
                 processes: int = 1) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.processes = processes  # API server processes, each with its own store
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.max_entries > 0

    def __len__(self) -> int:
        self._evict()
        return len(self._entries)

    def put(self, entry: StoredResponse) -> None:
        self._entries[entry.response["id"]] = entry
        if not entry.running:
            self.finished(entry)
        self._evict()

    def finished(self, entry: StoredResponse) -> None:
        """Start ``entry``'s time to live (it finished, failed or was cancelled)."""
        entry.task = None
        entry.expires_at = time.monotonic() + self.ttl_s
        self._evict()

    def get(self, response_id: str, param: str = "response_id") -> StoredResponse:
        self._evict()
        entry = self._entries.get(response_id)
        if entry is None:
            raise APIError(404, self._missing(response_id), param=param, code="response_not_found")
        return entry

    def delete(self, response_id: str) -> StoredResponse:
        entry = self.get(response_id)
        if entry.task is not None:
            entry.task.cancel()
        return self._entries.pop(response_id)

    def _evict(self) -> None:
        now = time.monotonic()
        for response_id in [i for i, e in self._entries.items() if e.expires_at <= now]:
            del self._entries[response_id]
        finished = [i for i, e in self._entries.items() if not e.running]  # oldest first
        for response_id in finished[: max(0, len(finished) - self.max_entries)]:
            del self._entries[response_id]

    def _missing(self, response_id: str) -> str:
        if not self.enabled:
            return (f"response '{response_id}' not found: this server stores no responses (--responses-store-size 0); "
                    "send the whole conversation as input instead of previous_response_id")
        shared = (f"; this server runs {self.processes} API server processes, each keeping the responses it "
                  "answered" if self.processes > 1 else "")
        return (f"response '{response_id}' not found: it was not stored (store=false), was deleted, expired "
                f"({self.ttl_s:g} s after it finished, --responses-store-ttl) or was dropped as the oldest of "
                f"{self.max_entries} kept (--responses-store-size){shared}")
