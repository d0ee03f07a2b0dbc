"""Data parallelism: ``data_parallel_size`` engine cores, each in its own process with its own ranks and devices
(replica k on the k-th group of ``world_size`` devices), behind one front end (docs/distributed.md).

The front end routes each request to one core (:class:`~pagoda.engine_core.router.CoreRouter`: prefix
affinity, then load) and reads every core's outputs. A core that dies fails only the requests it held
(offline: they finish as aborted; served: they get the engine's error) and is never chosen again; the
others keep serving. :class:`DataParallelClient` serves ``LLM(data_parallel_size=D)``,
:class:`AsyncDataParallelClient` the API servers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from typing import Any, Callable

import msgspec
import zmq

from pagoda import messages as msg
from pagoda.config import EngineConfig
from pagoda.engine_core.client import (POLL_MS, AsyncMPClient, CoreProcess, EngineCoreClient, EngineDeadError,
                                       EngineStartError, SyncMPClient)
from pagoda.engine_core.core import EngineCore
from pagoda.engine_core.router import CoreRouter

logger = logging.getLogger("pagoda")
BROADCAST = frozenset({"reset_prefix_cache", "start_profile", "stop_profile", "add_lora", "remove_lora"})
AVERAGED = frozenset({"kv_cache_usage", "prefix_cache_hit_rate", "spec_goodput_ratio"})


def start_cores(config: EngineConfig, core_factory: Callable = EngineCore.from_config,
                log_level: str = "INFO") -> list[CoreProcess]:
    """The ``data_parallel_size`` engine cores, started together; EngineStartError naming the replica that failed
    (the others are stopped)."""
    cores: list[CoreProcess] = []
    try:
        for rank in range(config.data_parallel_size):
            replica = dataclasses.replace(config, data_parallel_rank=rank)
            cores.append(CoreProcess(replica, core_factory, log_level, wait=False))
        for rank, core in enumerate(cores):
            try:
                core.wait_until_ready()
            except EngineStartError as exc:
                raise EngineStartError(f"data-parallel engine core {rank}: {exc}") from None
    except BaseException:
        for core in cores:
            core.shutdown(5.0)
        raise
    return cores


def merge_stats(stats: list[msg.StepStats]) -> msg.StepStats:
    """One StepStats for several cores: counts summed, fractions averaged, flags or-ed."""
    if len(stats) == 1:
        return stats[0]
    merged = {}
    for name in msg.StepStats.__struct_fields__:
        values = [getattr(s, name) for s in stats]
        if name in AVERAGED:
            merged[name] = sum(values) / len(values)
        elif isinstance(values[0], list):
            merged[name] = [sum(column) for column in zip(*values)] if all(values) else max(values, key=len)
        elif isinstance(values[0], bool):
            merged[name] = any(values)
        else:
            merged[name] = sum(values)
    return msg.StepStats(**merged)


class Replicas:
    """A front end's view of its cores: where each sequence went, the cores' latest gauges."""

    def __init__(self, num_cores: int, block_size: int) -> None:
        self.router = CoreRouter(num_cores, block_size)
        self.owner: dict[str, int] = {}  # request and sequence ids -> core
        self.stats = {d: msg.StepStats() for d in range(num_cores)}  # core -> its latest gauges (live cores)

    def route(self, adds: list[msg.AddRequest]) -> int:
        """The core for one request's sequences (they share its prompt)."""
        core = self.router.choose(adds[0].prompt_token_ids)
        for add in adds:
            self.owner[add.request_id] = core
            for sequence_id in add.output_ids:
                self.owner[sequence_id] = core
                self.router.load[core] += 1
        return core

    def by_core(self, ids: list[str]) -> dict[int, list[str]]:
        groups: dict[int, list[str]] = defaultdict(list)
        for i in ids:
            if i in self.owner:
                groups[self.owner[i]].append(i)
        return groups

    def received(self, core: int, batch: msg.EngineCoreOutputs) -> None:
        if batch.stats is not None:
            self.stats[core] = batch.stats
        for out in batch.outputs:
            if out.finish_reason is not None and self.owner.pop(out.request_id, None) is not None:
                self.router.load[core] -= 1
                self.owner.pop(out.request_id.partition("#")[0], None)

    def lost(self, core: int) -> list[str]:
        """The sequences ``core`` held, now that it died (forgotten here)."""
        self.router.died(core)
        self.stats.pop(core, None)
        gone = [i for i, d in self.owner.items() if d == core]
        for i in gone:
            del self.owner[i]
        return gone

    def merged_stats(self) -> msg.StepStats:
        return merge_stats([self.stats[d] for d in sorted(self.stats)]) if self.stats else msg.StepStats()

    @property
    def live(self) -> list[int]:
        return [d for d, alive in enumerate(self.router.alive) if alive]


class DataParallelClient(EngineCoreClient):
    """The offline client of several core processes (``LLM(data_parallel_size=D)``)."""

    def __init__(self, cores: list[CoreProcess]) -> None:
        self.clients = [SyncMPClient(core.address, core.info, core.alive, owner=core) for core in cores]
        self.info = cores[0].info
        self.replicas = Replicas(len(cores), self.info.block_size)
        self.poller = zmq.Poller()
        for client in self.clients:
            self.poller.register(client.socket, zmq.POLLIN)

    @classmethod
    def start(cls, config: EngineConfig, log_level: str = "INFO") -> "DataParallelClient":
        return cls(start_cores(config, log_level=log_level))

    def add_requests(self, adds: list[msg.AddRequest]) -> None:
        self.clients[self.replicas.route(adds)].add_requests(adds)

    def abort(self, request_ids: list[str]) -> None:
        for core, ids in self.replicas.by_core(request_ids).items():
            self.clients[core].abort(ids)

    def get_outputs(self) -> msg.EngineCoreOutputs:
        """The next batch of any core; a dead core's sequences come back aborted (EngineDeadError once none lives)."""
        while True:
            ready = dict(self.poller.poll(POLL_MS))
            live = self.replicas.live
            self._turn = (getattr(self, "_turn", -1) + 1) % len(live)  # each core first in turn: none starves
            for core in live[self._turn:] + live[: self._turn]:
                client = self.clients[core]
                if not (client._buffered or client.socket in ready or not client.alive()):
                    continue
                try:
                    batch = client.get_outputs()
                except EngineDeadError as exc:
                    return self._lost(core, str(exc))
                self.replicas.received(core, batch)
                return msgspec.structs.replace(batch, stats=self.replicas.merged_stats())

    def _lost(self, core: int, reason: str) -> msg.EngineCoreOutputs:
        ids = self.replicas.lost(core)
        self.poller.unregister(self.clients[core].socket)
        error = f"data-parallel engine core {core} died ({reason}); its {len(ids)} sequence(s) were aborted"
        if not self.replicas.live:
            raise EngineDeadError(error)
        logger.error("%s; the other cores keep serving", error)
        return msg.EngineCoreOutputs([msg.EngineCoreOutput(i, [], "abort") for i in ids], self.replicas.merged_stats(),
                                     error=error)

    def call_utility(self, method: str, *args: Any) -> Any:
        """Every live core's answer for the utilities that change each core (the first's returned), else the first
        live core's."""
        live = self.replicas.live if method in BROADCAST else self.replicas.live[:1]
        results = [self.clients[core].call_utility(method, *args) for core in live]
        return results[0]

    def shutdown(self) -> None:
        for client in self.clients:
            client.shutdown()


class AsyncDataParallelClient:
    """An API server's client of several core processes: :class:`AsyncMPClient`'s interface, routed."""

    def __init__(self, cores: list[tuple[str, Callable[[], bool]]], info: msg.EngineInfo) -> None:
        self.clients = [AsyncMPClient(address, info, alive) for address, alive in cores]
        self.info = info
        self.replicas = Replicas(len(cores), info.block_size)
        self.engine_stats = self.replicas.stats  # core -> its latest gauges (/metrics, label engine)

    def start(self, on_outputs: Callable[[msg.EngineCoreOutputs], None],
              on_dead: Callable[..., None]) -> None:
        """``on_dead(reason)`` once every core is gone; ``on_dead(reason, sequence_ids)`` for the sequences of one
        core that died while others live."""
        for core, client in enumerate(self.clients):
            client.start(lambda batch, core=core: self._outputs(core, batch, on_outputs),
                         lambda reason, core=core: self._dead(core, reason, on_dead))

    def _outputs(self, core: int, batch: msg.EngineCoreOutputs, on_outputs) -> None:
        self.replicas.received(core, batch)
        batch.engine_index = core  # /metrics labels its requests' series with it
        on_outputs(batch)

    def engine_of(self, request_id: str) -> int:
        """The core a request (not yet finished) was routed to; 0 if unknown."""
        owner = self.replicas.owner
        return owner.get(request_id, owner.get(f"{request_id}#0", 0))

    def _dead(self, core: int, reason: str, on_dead) -> None:
        ids = self.replicas.lost(core)
        if self.replicas.live:
            on_dead(f"data-parallel engine core {core}: {reason}", ids)
        else:
            on_dead(reason)

    async def add_requests(self, adds: list[msg.AddRequest]) -> None:
        try:
            core = self.replicas.route(adds)
        except RuntimeError as exc:
            raise EngineDeadError(str(exc)) from None
        await self.clients[core].add_requests(adds)

    async def abort(self, request_ids: list[str]) -> None:
        for core, ids in self.replicas.by_core(request_ids).items():
            await self.clients[core].abort(ids)

    async def call_utility(self, method: str, *args: Any, timeout: float = 30.0) -> Any:
        live = self.replicas.live if method in BROADCAST else self.replicas.live[:1]
        if not live:
            raise EngineDeadError("every data-parallel engine core has died")
        results = await asyncio.gather(*(self.clients[core].call_utility(method, *args, timeout=timeout)
                                         for core in live))
        return results[0]

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
