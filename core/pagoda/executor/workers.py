"""The worker ranks seen from the driver (rank 0): how they start, how steps reach them, how their
failures surface.

An engine has ``pipeline_parallel_size x tensor_parallel_size`` ranks; global rank ``r`` is
tensor-parallel rank ``r % T`` of pipeline stage ``r // T`` (:func:`pagoda.interfaces.parallel.join_groups`).
Three ways to start (``EngineConfig.distributed_executor_backend``):

- ``mp``: the driver spawns ranks 1..N-1 as processes on this host (rank r on device r, after the
  devices of the data-parallel replicas before this one);
- ``torchrun``: torchrun started every rank (on one host or several); rank 0 runs the engine,
  the others enter :func:`pagoda.executor.worker.run_torchrun_worker` from the CLI;
- ``ray``: ranks 1..N-1 are actors of a Ray cluster, placed by a placement group
  (:mod:`pagoda.executor.ray_workers`).

Channels: the model's collectives run on the torch.distributed group (the Platform names the
backend: NCCL/RCCL on GPUs, gloo on CPU). Step messages go from a ZeroMQ ROUTER on the driver to
one DEALER per worker; a PULL socket collects worker errors, read by a watcher thread that also
watches the worker processes (``mp``, ``ray``); under pipeline parallelism another PULL socket takes
the last stage's sampled tokens (:mod:`pagoda.executor.pipeline`). A failure makes the next step raise
:class:`WorkerFailedError`; if the driver is stuck in a collective with a dead rank, the watcher
aborts the group, and exits the process after ``FAIL_GRACE_S`` if even that does not free it.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

import msgspec
import torch
import torch.distributed as dist
import zmq

from pagoda import envs
from pagoda.config import EngineConfig
from pagoda.interfaces.parallel import WHOLE, PipelineParallel, TensorParallel, join_groups
from pagoda.errors import PagodaError
from pagoda.executor import messages
from pagoda.interfaces.platform import Platform
from pagoda.plugins import get_plugin_manager

logger = logging.getLogger("pagoda")
STARTUP_TIMEOUT_S = 600.0  # workers must say hello (imports, device set) within this
WATCH_MS = 200
FAIL_GRACE_S = 20.0
LEAVE_S = 30.0  # the longest the driver waits to leave the group at shutdown
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class WorkerFailedError(PagodaError, RuntimeError):
    """A tensor- or pipeline-parallel rank died or failed: the engine cannot run steps any more."""


@dataclass
class WorkerSpec:
    """What a worker process needs to join the group (pickled once, at spawn)."""

    config: EngineConfig
    rank: int
    world_size: int
    local_rank: int
    init_method: str  # torch.distributed init method ("env://" under torchrun)
    step_address: str
    error_address: str
    result_address: str  # pipeline parallelism: where the last stage sends the sampled tokens
    plugins: tuple  # the driver's (allow, block) plugin lists
    parent_pid: int | None  # exit when this process is gone (mp); None under torchrun
    num_threads: int
    log_level: int


def dist_timeout() -> timedelta:
    """How long a collective may wait for the other ranks (``PAGODA_DIST_TIMEOUT_S``, default 600)."""
    return timedelta(seconds=envs.DIST_TIMEOUT_S.get())


def fast_sums(config: EngineConfig, one_host: bool) -> bool:
    """Whether the ranks sum small messages with the platform's fast all-reduce: ranks of one host, unless
    ``--disable-custom-all-reduce``."""
    return one_host and not config.disable_custom_all_reduce


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARS)


def use_torchrun(config: EngineConfig) -> bool:
    if config.distributed_executor_backend == "auto":
        return launched_by_torchrun() and int(os.environ["WORLD_SIZE"]) == config.world_size
    return config.distributed_executor_backend == "torchrun"


def parallel_sizes(config: EngineConfig) -> str:
    """The sizes that make the ranks, as a user set them (for messages)."""
    tp, pp = config.tensor_parallel_size, config.pipeline_parallel_size
    return f"tensor_parallel_size {tp}" if pp == 1 else f"tensor_parallel_size {tp} x pipeline_parallel_size {pp}"


def device_offset(config: EngineConfig) -> int:
    """The first local device of this engine's ranks: data-parallel replica k uses the k-th group of
    ``world_size`` devices."""
    return (config.data_parallel_rank or 0) * config.world_size


def check_platform(config: EngineConfig, platform: Platform, local_ranks: int) -> str:
    """The collective backend, after checking the platform can hold ``local_ranks`` ranks here."""
    sizes = parallel_sizes(config)
    backend = platform.dist_backend()
    if backend is None:
        raise ValueError(f"{sizes} needs collectives, but the {platform.device_type} platform "
                         f"({type(platform).__name__}) has no torch.distributed backend; use one rank")
    available = platform.device_count()
    if local_ranks > available:
        raise ValueError(f"{sizes} puts {local_ranks} ranks on this host, but it has only "
                         f"{available} {platform.device_type} device(s); lower the sizes, or spread the "
                         "ranks over hosts with Ray or torchrun (docs/distributed.md)")
    return backend


def start_workers(config: EngineConfig, platform: Platform) -> "WorkerGroup":
    """Start (or, under torchrun, join) the other ranks; returns once the group is formed."""
    if config.distributed_executor_backend == "ray":
        from pagoda.executor.ray_workers import start_ray_workers

        return start_ray_workers(config, platform)
    if use_torchrun(config):
        return _join_torchrun(config, platform)
    return _spawn(config, platform)


def worker_spec(config: EngineConfig, group: "WorkerGroup", rank: int, local_rank: int, init_method: str,
                parent_pid: int | None) -> WorkerSpec:
    """What rank ``rank`` needs to join this driver's group."""
    return WorkerSpec(config, rank, config.world_size, local_rank, init_method, group.step_address,
                      group.error_address, group.result_address, get_plugin_manager().settings, parent_pid,
                      torch.get_num_threads(), logging.getLogger().getEffectiveLevel())


def _spawn(config: EngineConfig, platform: Platform) -> "WorkerGroup":
    n, offset = config.world_size, device_offset(config)
    backend = check_platform(config, platform, offset + n)
    group = WorkerGroup.bind("127.0.0.1", n, config.pipeline_parallel_size)
    init_method = f"tcp://127.0.0.1:{_free_port()}"
    context = multiprocessing.get_context("spawn")
    from pagoda.executor.worker import run_spawned_worker

    for rank in range(1, n):
        spec = worker_spec(config, group, rank, offset + rank, init_method, os.getpid())
        proc = context.Process(target=run_spawned_worker, args=(spec,), name=f"pagoda-rank{rank}", daemon=True)
        proc.start()
        group.procs[rank] = proc
    group.join_as_driver(config, platform, backend, init_method, offset, fast_sums(config, True))
    logger.info("%s: %d ranks on this host (%s), workers %s", parallel_sizes(config), n, backend,
                ", ".join(str(p.pid) for p in group.procs.values()))
    return group


def _join_torchrun(config: EngineConfig, platform: Platform) -> "WorkerGroup":
    n, rank = config.world_size, int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if world != n or rank != 0:
        raise ValueError(f"under torchrun, {parallel_sizes(config)} ({n} ranks) must equal WORLD_SIZE ({world}) and "
                         f"the engine runs on rank 0 (this is rank {rank}); see docs/distributed.md")
    local = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    backend = check_platform(config, platform, local)
    platform.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, init_method="env://", rank=0, world_size=n, timeout=dist_timeout())
    group = WorkerGroup.bind(_host_ip(), n, config.pipeline_parallel_size)
    dist.broadcast_object_list([group.step_address, group.error_address, group.result_address], src=0)  # once
    group.tp, group.pp = join_groups(platform, 0, config.tensor_parallel_size, config.pipeline_parallel_size,
                                     fast_sums(config, local == n))
    group.start_watcher()
    group.wait_for_hellos()
    logger.info("%s: %d ranks started by torchrun (%s)", parallel_sizes(config), n, backend)
    return group


class WorkerGroup:
    """The driver's handle on ranks 1..N-1."""

    def __init__(self, context: zmq.Context, steps: zmq.Socket, errors: zmq.Socket, results: zmq.Socket, host: str,
                 world_size: int, stages: int = 1):
        self.context, self.steps, self.errors, self.results = context, steps, errors, results
        self.step_address, self.error_address, self.result_address = (
            f"tcp://{host}:{s.getsockopt(zmq.LAST_ENDPOINT).decode().rsplit(':', 1)[1]}" for s in (steps, errors, results))
        self.world_size, self.stages = world_size, stages
        self.tp: TensorParallel | None = None
        self.pp: PipelineParallel = WHOLE
        # rank -> its process (mp), or a handle with the same methods (pagoda.executor.ray_workers.RayRank)
        self.procs: dict[int, multiprocessing.process.BaseProcess] = {}
        self.identities: list[bytes] = []
        self.failure: str | None = None
        self._failed_at = 0.0
        self.busy_since: float | None = None  # set while the driver waits on the device or a collective
        self._closed = False
        self._watcher: threading.Thread | None = None
        self.cleanups: list = []  # called at the end of shutdown (the Ray executor frees its placement there)

    @classmethod
    def bind(cls, host: str, world_size: int, stages: int = 1) -> "WorkerGroup":
        context = zmq.Context()
        steps = context.socket(zmq.ROUTER)
        steps.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a send to a gone worker raises, never drops silently
        steps.setsockopt(zmq.LINGER, 0)
        steps.bind_to_random_port(f"tcp://{'*' if host != '127.0.0.1' else host}")
        pulls = [context.socket(zmq.PULL) for _ in range(2)]  # worker errors; the last stage's sampled tokens
        for pull in pulls:
            pull.setsockopt(zmq.LINGER, 0)
            pull.bind_to_random_port(f"tcp://{'*' if host != '127.0.0.1' else host}")
        return cls(context, steps, *pulls, host, world_size, stages)

    def join_as_driver(self, config: EngineConfig, platform: Platform, backend: str, init_method: str, device: int,
                       fast: bool) -> None:
        """Rank 0's part of the start-up, once the other ranks were started: wait for their hellos, form the
        process group on ``device``, then the tensor-parallel group and pipeline stage."""
        self.start_watcher()
        try:
            self.wait_for_hellos()
            platform.set_device(device)
            dist.init_process_group(backend, init_method=init_method, rank=0, world_size=self.world_size,
                                    timeout=dist_timeout())
            self.tp, self.pp = join_groups(platform, 0, config.tensor_parallel_size, config.pipeline_parallel_size,
                                           fast)
        except BaseException:
            self.shutdown()
            raise

    # -- start-up --------------------------------------------------------------------------------
    def wait_for_hellos(self) -> None:
        """Each worker's DEALER says hello first (the ROUTER learns its identity)."""
        self.identities = list(self.replies(STARTUP_TIMEOUT_S, "started"))

    def replies(self, timeout_s: float, what: str) -> dict[bytes, bytes]:
        """One frame from each worker (identity -> frame): its hello, or its answer to a message that asks
        for one."""
        deadline = time.monotonic() + timeout_s
        got: dict[bytes, bytes] = {}
        while len(got) < self.world_size - 1:
            self.check()
            if time.monotonic() > deadline:
                raise WorkerFailedError(f"only {len(got)} of {self.world_size - 1} worker ranks {what} "
                                        f"within {timeout_s:.0f} s")
            if self.steps.poll(100):
                identity, frame = self.steps.recv_multipart()
                got[identity] = frame
        return got

    def start_watcher(self) -> None:
        atexit.register(self.shutdown)  # a front end that exits without shutting the engine down
        self._watcher = threading.Thread(target=self._watch, name="pagoda-rank-watcher", daemon=True)
        self._watcher.start()

    # -- steps -----------------------------------------------------------------------------------
    def send(self, frame: bytes) -> None:
        for identity in self.identities:
            try:
                self.steps.send_multipart([identity, frame], copy=False)
            except zmq.ZMQError as exc:
                self._fail(f"worker rank {identity.decode()} is unreachable ({exc})")
                self.check()

    def check(self) -> None:
        """Raise WorkerFailedError if a rank failed."""
        if self.failure is not None:
            raise WorkerFailedError(self.failure)

    def error_after(self, exc: BaseException) -> WorkerFailedError:
        """The error to raise when a step failed with ``exc`` (a collective seeing a dead rank)."""
        deadline = time.monotonic() + 3.0
        while self.failure is None and time.monotonic() < deadline:  # the watcher may not have seen it yet
            time.sleep(0.05)
        if self.failure is None:
            self._fail(f"a step failed: {type(exc).__name__}: {exc}")
        return WorkerFailedError(self.failure)

    # -- failures --------------------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._closed:
            try:
                if self.errors.poll(WATCH_MS):
                    rank, text = msgspec.msgpack.decode(self.errors.recv())
                    self._fail(f"{self.rank_name(rank)} failed: {text}")
            except zmq.ZMQError:
                return  # closed by shutdown
            for rank, proc in self.procs.items():
                if proc.exitcode is not None and not self._closed:
                    self._fail(f"{self.rank_name(rank)} (pid {proc.pid}) exited {_exit_reason(proc.exitcode)}")
            stuck = self.busy_since is not None and self.failure is not None
            if stuck and time.monotonic() - max(self.busy_since, self._failed_at) > FAIL_GRACE_S:
                logger.critical("%s; the driver is stuck in a collective with it: exiting", self.failure)
                os._exit(1)

    def rank_name(self, rank: int) -> str:
        """How errors name a rank: ``tensor-parallel rank 1``, or with pipeline stages ``rank 3 (pipeline stage 1,
        tensor-parallel rank 1)``."""
        if self.stages == 1:
            return f"tensor-parallel rank {rank}"
        tp_size = self.world_size // self.stages
        return f"rank {rank} (pipeline stage {rank // tp_size}, tensor-parallel rank {rank % tp_size})"

    def _fail(self, reason: str) -> None:
        if self.failure is not None or self._closed:
            return
        self.failure, self._failed_at = reason, time.monotonic()
        logger.error("%s; the engine stops", reason)
        if self.tp is not None and dist.is_initialized() and dist.get_backend() != "gloo":
            # frees a driver blocked in an NCCL collective (gloo fails by itself on a closed peer); in a
            # thread of its own, since an abort can block too: the watcher's grace exit must still come
            threading.Thread(target=_abort_group, name="pagoda-tp-abort", daemon=True).start()

    # -- shutdown --------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Tell the workers to stop, leave the group with them, wait for them (then end them). Idempotent."""
        if self._closed:
            return
        self._closed = True
        stop = messages.encode(messages.StopWorker())
        for identity in self.identities:
            try:
                self.steps.send_multipart([identity, stop], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass
        _leave_group()  # NCCL's destroy is collective: while the workers leave too, not after they exit
        for proc in self.procs.values():
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(3)
            if proc.is_alive():
                proc.kill()
                proc.join(3)
        if self._watcher is not None:
            self._watcher.join(1)
        for sock in (self.steps, self.errors, self.results):
            sock.close(0)
        self.context.term()
        for cleanup in self.cleanups:
            cleanup()


def _leave_group() -> None:
    """destroy_process_group, given LEAVE_S: it waits for every rank, and a dead one never comes."""
    if not dist.is_initialized():
        return
    leave = threading.Thread(target=_destroy_group, name="pagoda-tp-leave", daemon=True)
    leave.start()
    leave.join(LEAVE_S)
    if leave.is_alive():
        logger.warning("Tensor parallel: leaving the process group took over %.0f s (a rank did not leave with "
                       "this one); went on without it", LEAVE_S)


def _destroy_group() -> None:
    try:
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - a group broken by a dead rank
        logger.debug("destroy_process_group: %s", exc)


def _abort_group() -> None:
    try:
        dist.distributed_c10d._abort_process_group()
    except Exception as exc:  # noqa: BLE001 - best effort; the grace exit follows
        logger.warning("Could not abort the process group: %s", exc)


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"with status {code}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _host_ip() -> str:
    """This host's address as the other hosts reach it (``PAGODA_HOST_IP`` overrides)."""
    explicit = envs.HOST_IP.get()
    if explicit:
        return explicit
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((os.environ.get("MASTER_ADDR", "127.0.0.1"), 1))  # no packet: picks the route's interface
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
