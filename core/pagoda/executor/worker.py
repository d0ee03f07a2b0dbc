"""A worker rank (1..N-1): builds its shard of the model, then runs every step the driver sends.

It runs the same ModelRunner as the driver on the same scheduled steps (rebuilt by
:class:`~pagoda.executor.messages.StepMirror`), so every rank issues the same collectives in
the same order; the tokens it samples are replaced by its tensor-parallel rank 0's (``ModelRunner``
broadcasts them, except in steps of plain greedy rows: ``Sampler.picks_alike``). Under pipeline
parallelism a rank runs its stage's layers; rank 0 of the last stage sends each step's tokens to the
driver (:mod:`pagoda.executor.pipeline`).
Errors go to the driver (rank, text) before the process exits with status 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import msgspec
import torch
import torch.distributed as dist
import zmq

from pagoda.config import EngineConfig
from pagoda.logs import configure_logging
from pagoda.interfaces.parallel import PipelineParallel, TensorParallel, join_groups
from pagoda.runner.torch_profiler import RankProfiler
from pagoda.executor import messages
from pagoda.executor.pipeline import ResultSender
from pagoda.executor.workers import WorkerSpec, check_platform, dist_timeout, fast_sums, parallel_sizes

logger = logging.getLogger("pagoda.worker")
POLL_MS = 1000  # how often an idle worker checks that the driver is alive


def run_spawned_worker(spec: WorkerSpec) -> None:
    """Process entry point of a worker spawned by the driver on this host."""
    from pagoda.runner.shard import select_platform
    from pagoda.plugins import manager as plugin_manager

    configure_logging(spec.log_level)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver decides when to stop
    torch.set_num_threads(spec.num_threads)
    plugin_manager.configure(*spec.plugins)
    channels = WorkerChannels(spec.rank, spec.step_address, spec.error_address, spec.result_address)
    try:
        platform = select_platform(spec.config)
        platform.set_device(spec.local_rank)
        channels.hello()
        dist.init_process_group(platform.dist_backend(), init_method=spec.init_method, rank=spec.rank,
                                world_size=spec.world_size, timeout=dist_timeout())
        config = spec.config
        tp, pp = join_groups(platform, spec.rank, config.tensor_parallel_size, config.pipeline_parallel_size,
                             fast_sums(config, True))
        serve_steps(config, platform, tp, pp, channels, spec.parent_pid, spec.rank)
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, then exit 1
        channels.report(exc)
        raise SystemExit(1) from None
    finally:
        channels.close()


def run_torchrun_worker(config: EngineConfig) -> int:
    """Entry point of ranks > 0 started by torchrun (the CLI calls it instead of its command)."""
    from pagoda.runner.shard import select_platform

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != config.world_size:
        raise SystemExit(f"torchrun started {world} processes but {parallel_sizes(config)} makes "
                         f"{config.world_size} ranks; they must be equal")
    platform = select_platform(config)
    check_platform(config, platform, int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    platform.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(platform.dist_backend(), init_method="env://", rank=rank, world_size=world,
                            timeout=dist_timeout())
    addresses: list = [None, None, None]
    dist.broadcast_object_list(addresses, src=0)
    channels = WorkerChannels(rank, *addresses)
    try:
        channels.hello()
        one_host = int(os.environ.get("LOCAL_WORLD_SIZE", world)) == world
        tp, pp = join_groups(platform, rank, config.tensor_parallel_size, config.pipeline_parallel_size,
                             fast_sums(config, one_host))
        serve_steps(config, platform, tp, pp, channels, None, rank)
    except BaseException as exc:  # noqa: BLE001 - reported to the driver, then exit 1
        channels.report(exc)
        return 1
    finally:
        channels.close()
    return 0


class WorkerChannels:
    """A DEALER for the driver's steps, a PUSH for this worker's errors and (made when this rank sends them:
    :meth:`open_results`) a PUSH for the last pipeline stage's sampled tokens."""

    def __init__(self, rank: int, step_address: str, error_address: str, result_address: str) -> None:
        self.rank = rank
        self.result_address = result_address
        self.context = zmq.Context()
        self.steps = self.context.socket(zmq.DEALER)
        self.steps.setsockopt(zmq.IDENTITY, str(rank).encode())
        self.steps.setsockopt(zmq.LINGER, 0)
        self.steps.connect(step_address)
        self.errors = self.context.socket(zmq.PUSH)
        self.errors.setsockopt(zmq.LINGER, 2000)
        self.errors.connect(error_address)
        self.results: zmq.Socket | None = None

    def open_results(self) -> ResultSender:
        self.results = self.context.socket(zmq.PUSH)
        self.results.setsockopt(zmq.LINGER, 0)
        self.results.connect(self.result_address)
        return ResultSender(self.results)

    def hello(self) -> None:
        self.steps.send(b"hello")

    def report(self, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        logger.error("Rank %d failed: %s", self.rank, text, exc_info=not isinstance(exc, SystemExit))
        try:
            self.errors.send(msgspec.msgpack.encode([self.rank, text]), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def close(self) -> None:
        self.steps.close(0)
        self.errors.close()
        if self.results is not None:
            self.results.close(0)
        self.context.term()


def _profile(profiler: RankProfiler, message: messages.Profile) -> bytes:
    """Start or stop this rank's profiler; the answer for the driver: empty, or what went wrong."""
    try:
        profiler.switch(message.directory, message.keep)
    except (OSError, RuntimeError) as exc:
        return f"rank {profiler.rank}: {type(exc).__name__}: {exc}".encode()
    return b""


def serve_steps(config: EngineConfig, platform, tp: TensorParallel, pp: PipelineParallel, channels: WorkerChannels,
                parent_pid: int | None, rank: int) -> None:
    """Build this rank's shard and runner like the driver, then run steps until told to stop."""
    from pagoda.runner.shard import build_model_shard
    from pagoda.executor.base import make_runner
    from pagoda.executor.features import last_stage_features, rank_features
    from pagoda.loader import load_hf_config, resolve_model

    source = resolve_model(config.model)
    hf_config = load_hf_config(source)
    shard = build_model_shard(config, platform, source, hf_config, tp, pp)
    samples = shard.pp.size > 1 and shard.pp.is_last and tp.rank == 0  # its tokens are the step's
    features = last_stage_features(config, source, hf_config, platform) if samples else []
    runner = make_runner(config, platform, shard.attention, shard.model, shard.kv_caches, shard.max_model_len, tp,
                         features + rank_features(config, shard.model, platform, shard.dtype), shard.pp)
    results = channels.open_results() if samples else None
    mirror, pending, profiler, step = messages.StepMirror(), None, RankProfiler(rank), 0
    while True:
        if results is not None and results.launched and not channels.steps.poll(0):
            results.send_oldest()  # no newer step to launch first: the oldest step's tokens go to the driver
            continue
        if not channels.steps.poll(POLL_MS):
            if parent_pid is not None and os.getppid() != parent_pid:
                logger.warning("Rank %d: the driver is gone, exiting", rank)
                return
            continue
        message = messages.decode(channels.steps.recv(copy=False))
        if isinstance(message, messages.StopWorker):
            break
        if isinstance(message, messages.Profile):
            channels.steps.send(_profile(profiler, message))
            continue
        for request_id in message.finished:
            runner.release(request_id)
        out, tables = mirror.apply(message)
        pending = runner.launch(out, tables, pending if message.has_prev else None)
        if results is not None:
            results.add(step, pending)
        step += 1
    del pending
    profiler.close()
    runner.drop_graphs()
    dist.destroy_process_group()  # collective under NCCL: the driver leaves at the same time
    sys.stdout.flush()
