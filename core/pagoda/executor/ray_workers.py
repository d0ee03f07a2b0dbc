"""``--distributed-executor-backend ray``: the worker ranks as actors of a Ray cluster (docs/distributed.md).

The engine core joins the cluster (``ray.init``: the one ``ray start`` made on this host, or ``RAY_ADDRESS``,
else a local one) and reserves one bundle per rank in a placement group: a device each (``GPU`` on GPU
platforms, a ``CPU`` on the CPU platform), bundle 0 on this host for rank 0, which runs here in the engine
core's process as with ``mp``. One stage (tensor parallelism alone) is packed ``STRICT_PACK`` onto one node;
several stages are packed ``PACK`` and each stage must land on one node (its tensor-parallel sums stay
within a node). Every bundle gets a small actor: rank 0's only holds its device and tells which one it is,
the others run :func:`pagoda.executor.worker.run_spawned_worker` like spawned processes. Steps, errors and
tokens travel as with ``mp`` (ZeroMQ, torch.distributed on the driver's address); Ray only places and starts
the ranks. A cluster without the devices is refused at once, naming what it has.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from pagoda.config import EngineConfig
from pagoda.errors import ConfigError
from pagoda.executor.workers import (WorkerFailedError, WorkerGroup, _free_port, check_platform, fast_sums,
                                     parallel_sizes, worker_spec)
from pagoda.interfaces.platform import Platform

logger = logging.getLogger("pagoda")
PLACEMENT_TIMEOUT_S = 120.0
# the actors see every device of their node and set the one Ray gave them, as spawned ranks do
NOSET = {f"RAY_EXPERIMENTAL_NOSET_{name}_VISIBLE_DEVICES": "1" for name in ("CUDA", "HIP", "ROCR")}


def import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError("distributed_executor_backend 'ray' needs Ray: pip install 'pagoda[ray]'") from None
    return ray


class RankActor:
    """One rank's actor (made remote in :func:`start_ray_workers`)."""

    def where(self) -> tuple[str, list, int]:
        """(node address, the device ids Ray gave this actor, its pid)."""
        import ray

        return ray.util.get_node_ip_address(), [int(i) for i in ray.get_gpu_ids()], os.getpid()

    def run(self, spec) -> None:
        from pagoda.executor.worker import run_spawned_worker

        run_spawned_worker(spec)


class RayRank:
    """A rank's actor as :class:`WorkerGroup` watches and stops its processes."""

    def __init__(self, ray, actor, pid: int) -> None:
        self.ray, self.actor, self.pid = ray, actor, pid
        self.done = None  # the ObjectRef of its run(), once started
        self._exitcode: int | None = None

    @property
    def exitcode(self) -> int | None:
        if self._exitcode is None and self.done is not None:
            ready, _ = self.ray.wait([self.done], timeout=0)
            if ready:
                try:
                    self.ray.get(ready[0])
                    self._exitcode = 0
                except Exception:  # noqa: BLE001 - a failed rank or a dead actor: the error came through its report
                    self._exitcode = 1
        return self._exitcode

    def is_alive(self) -> bool:
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        if self.done is not None:
            self.ray.wait([self.done], timeout=timeout)

    def terminate(self) -> None:
        self.ray.kill(self.actor)
        self._exitcode = self._exitcode if self._exitcode is not None else -15

    kill = terminate


def start_ray_workers(config: EngineConfig, platform: Platform) -> WorkerGroup:
    """Place and start ranks 1..N-1 as Ray actors, rank 0 here; returns once the group is formed."""
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    n = config.world_size
    backend = check_platform(config, platform, 0)  # the devices are the cluster's: counted below
    resource = "CPU" if platform.device_type == "cpu" else "GPU"  # what Ray calls the platform's devices
    group_pg = _placement_group(ray, config, resource)
    host = ray.util.get_node_ip_address()
    group = WorkerGroup.bind(host, n, config.pipeline_parallel_size)
    ranks: list[_Placed] = []
    group.cleanups.append(lambda: _release(ray, group_pg, ranks[0].handle if ranks else None))
    try:
        ranks += _make_actors(ray, group_pg, n, resource)
        _check_stages(config, [rank.node for rank in ranks], host)
        init_method = f"tcp://{host}:{_free_port()}"
        for r in range(1, n):
            spec = worker_spec(config, group, r, ranks[r].device, init_method, None)
            ranks[r].handle.done = ranks[r].handle.actor.run.remote(spec)
            group.procs[r] = ranks[r].handle
        group.join_as_driver(config, platform, backend, init_method, ranks[0].device,
                             fast_sums(config, len({rank.node for rank in ranks}) == 1))
    except BaseException:
        group.shutdown()  # stops the started ranks, then frees rank 0's actor and the placement group
        raise
    logger.info("%s: %d ranks as Ray actors on %d node(s) (%s)", parallel_sizes(config), n,
                len({rank.node for rank in ranks}), backend)
    return group


def _placement_group(ray, config: EngineConfig, resource: str):
    """One bundle per rank, bundle 0 on this node; ValueError when the cluster lacks the devices."""
    from ray.util.placement_group import placement_group

    n = config.world_size
    have = ray.cluster_resources().get(resource, 0)
    if have < n:
        raise ValueError(f"{parallel_sizes(config)} needs {n} {resource} (one per rank), but the Ray cluster has "
                         f"{have:g} over {len(ray.nodes())} node(s); add nodes (ray start --address ...) or lower "
                         "the sizes")
    bundles = [{resource: 1} for _ in range(n)]
    bundles[0][f"node:{ray.util.get_node_ip_address()}"] = 0.001  # rank 0 runs here
    strategy = "STRICT_PACK" if config.pipeline_parallel_size == 1 else "PACK"
    group = placement_group(bundles, strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
    if not ready:
        ray.util.remove_placement_group(group)
        where = "on one node" if strategy == "STRICT_PACK" else "with rank 0 on this node"
        raise ValueError(f"the Ray cluster could not place {n} {resource} bundles {where} within "
                         f"{PLACEMENT_TIMEOUT_S:.0f} s (free: {ray.available_resources().get(resource, 0):g}); "
                         "tensor-parallel ranks need one node with that many devices")
    return group


class _Placed:
    def __init__(self, handle: RayRank, node: str, devices: list[int]) -> None:
        self.handle, self.node = handle, node
        self.device = devices[0] if devices else 0  # the local device index (CPU: unused)


def _make_actors(ray, group, n: int, resource: str) -> list[_Placed]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    remote = ray.remote(RankActor)
    amounts = {"num_cpus": 1, "num_gpus": 0} if resource == "CPU" else {"num_cpus": 0, "num_gpus": 1}
    actors = [remote.options(**amounts, runtime_env={"env_vars": NOSET}, scheduling_strategy=
                             PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=r)).remote()
              for r in range(n)]
    placed = []
    for actor, (node, devices, pid) in zip(actors, ray.get([a.where.remote() for a in actors])):
        placed.append(_Placed(RayRank(ray, actor, pid), node, devices))
    return placed


def _check_stages(config: EngineConfig, nodes: list[str], host: str) -> None:
    """Each pipeline stage's ranks on one node (their sums stay on the node), rank 0 here."""
    tp = config.tensor_parallel_size
    if nodes[0] != host:
        raise WorkerFailedError(f"Ray placed rank 0 on {nodes[0]}, not on this node ({host})")
    for stage in range(config.pipeline_parallel_size):
        spread = sorted(set(nodes[stage * tp : (stage + 1) * tp]))
        if len(spread) > 1:
            raise ValueError(f"Ray spread pipeline stage {stage}'s {tp} tensor-parallel ranks over nodes "
                             f"{', '.join(spread)}; each stage needs {tp} devices on one node")


def _release(ray, group: Any, holder: RayRank | None) -> None:
    if holder is not None:
        holder.terminate()
    try:
        ray.util.remove_placement_group(group)
    except Exception as exc:  # noqa: BLE001 - a cluster that went away
        logger.debug("remove_placement_group: %s", exc)
