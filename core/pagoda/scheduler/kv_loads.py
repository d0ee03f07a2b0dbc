"""What :class:`~pagoda.scheduler.PolicyScheduler` does with a KV connector (``attach_kv_connector``).

Admission: after a waiting request's local prefix-cache hits, the connector is asked how many of its next
blocks it can supply (by block key, :mod:`pagoda.kv_cache.block_keys`); if any, the request takes its
blocks (not offered to the prefix cache yet), leaves the waiting queue and waits for every rank to load
them, holding a seat; the other requests run meanwhile. When the loads end (``kv_loads_finished``) the
loaded blocks enter the prefix cache and the request runs with them computed; blocks that could not be
loaded are recomputed. Saving: each block that enters the prefix cache (computed by the step being
scheduled) is offered to the connector; those it wants are saved after that step's forward pass.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pagoda.interfaces.kv_connector import BlockTransfer, KVConnector, KVTransferPlan
from pagoda.kv_cache.block_keys import BlockKeys
from pagoda.kv_cache.block_pool import KVBlock
from pagoda.kv_cache.manager import KVCacheManager
from pagoda.request import Request

logger = logging.getLogger("pagoda")


@dataclass
class Loading:
    """A request waiting for its blocks: ``hit_tokens`` from the local prefix cache, ``planned`` blocks after."""

    request: Request
    hit_tokens: int
    planned: int
    aborted: bool = False  # finished while loading: its blocks go back once the loads ended on every rank


@dataclass
class ConnectorCounts:
    """Blocks the scheduler asked for, got and offered (counters since start)."""

    lookups: int = 0  # admissions that asked the connector
    planned_blocks: int = 0  # blocks it was to supply
    loaded_blocks: int = 0  # blocks every rank loaded
    failed_blocks: int = 0  # blocks planned but recomputed (a rank could not load them)
    saves: int = 0  # blocks offered to the connector's write
    errors: int = 0  # lookup/wants that raised (counted as nothing found, nothing wanted)


class KVLoads:
    """The connector's scheduler side: admissions that load, their completion, and each step's plan."""

    def __init__(self, connector: KVConnector, kv_cache: KVCacheManager) -> None:
        self.connector = connector
        self.kv_cache = kv_cache
        self.block_size = kv_cache.block_size
        self.keys = BlockKeys(kv_cache.block_size)
        self.loading: dict[str, Loading] = {}
        self.counts = ConnectorCounts()
        self._loads: dict[str, list[BlockTransfer]] = {}  # started by this schedule()
        self._saves: list[BlockTransfer] = []
        if connector.config.saves:
            kv_cache.on_cached = self._offer

    @property
    def num_loading(self) -> int:
        return len(self.loading)

    def start(self, request: Request, hits: list[KVBlock], num_hit_tokens: int) -> bool:
        """Admit ``request`` to load the connector's blocks after its ``hits``; False when it supplies none (or
        they do not fit now): admit it as usual."""
        if not self.connector.config.loads:
            return False
        bs, first = self.block_size, len(hits)
        last = min(request.num_tokens - 1, request.num_known_tokens) // bs  # the last token is always computed
        if last <= first:
            return False
        keys = self.keys.first(request, last)
        self.counts.lookups += 1
        n = min(self._ask(self.connector.lookup, keys[first:], 0), last - first)
        if n <= 0 or not self.kv_cache.allocate_slots(request, n * bs, hits, register=False):
            return False
        block_ids = self.kv_cache.block_ids(request.request_id)
        self._loads[request.request_id] = [BlockTransfer(block_ids[first + i], keys[first + i]) for i in range(n)]
        self.loading[request.request_id] = Loading(request, num_hit_tokens, n)
        self.counts.planned_blocks += n
        return True

    def finished(self, loaded: dict[str, int]) -> list[tuple[Request, int]]:
        """The requests whose loads ended, with their computed tokens (hits + loaded blocks), ready to run;
        aborted ones give their blocks back."""
        ready = []
        for request_id, num_blocks in loaded.items():
            entry = self.loading.pop(request_id, None)
            if entry is None:
                continue
            if entry.aborted:
                self.kv_cache.free(entry.request)
                self.keys.forget(request_id)
                continue
            num_blocks = max(0, min(num_blocks, entry.planned))
            self.counts.loaded_blocks += num_blocks
            if num_blocks < entry.planned:
                self.counts.failed_blocks += entry.planned - num_blocks
                logger.warning("KV connector '%s': %d of %d blocks of request %s could not be loaded; recomputing them",
                               self.connector.config.kv_connector, entry.planned - num_blocks, entry.planned,
                               request_id)
            tokens = entry.hit_tokens + num_blocks * self.block_size
            self.kv_cache.register_computed(entry.request, tokens)
            ready.append((entry.request, tokens))
        return ready

    def abort(self, request: Request) -> bool:
        """Whether ``request`` is loading (its blocks are then freed when the loads end, not now: a rank may
        still be writing them)."""
        entry = self.loading.get(request.request_id)
        if entry is not None:
            entry.aborted = True
        return entry is not None

    def forget(self, request_id: str) -> None:
        """A finished request's keys."""
        if request_id not in self.loading:
            self.keys.forget(request_id)

    def plan(self) -> KVTransferPlan | None:
        """This step's loads and saves; an empty plan while loads are under way (the ranks report on them in
        each step), None when there is nothing to do."""
        if not (self._loads or self._saves or self.loading):
            return None
        plan = KVTransferPlan(self._loads, self._saves)
        self._loads, self._saves = {}, []
        return plan

    def _offer(self, request: Request, index: int, block: KVBlock) -> None:
        """A block entered the prefix cache (its KV is complete after this step): save it if the connector wants."""
        key = self.keys.key(request, index)
        if self._ask(self.connector.wants, key, False):
            self._saves.append(BlockTransfer(block.block_id, key))
            self.counts.saves += 1

    def _ask(self, method, arg, fallback):
        """A scheduler-side call of the connector; one that raises counts as ``fallback`` (logged)."""
        try:
            return method(arg)
        except Exception as exc:  # noqa: BLE001 - a connector's bug degrades to recompute
            self.counts.errors += 1
            logger.warning("KV connector '%s': %s raised %s: %s; going on without it", self.connector.config.kv_connector,
                           method.__name__, type(exc).__name__, exc)
            return fallback
