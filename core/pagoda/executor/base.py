"""The Executor interface, the single-device executor, and the runner every rank builds alike."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch

from pagoda.config import EngineConfig
from pagoda.interfaces.parallel import WHOLE, PipelineParallel, TensorParallel
from pagoda.runner.features import StepFeature
from pagoda.runner.graphs import use_graphs
from pagoda.runner.model_runner import ModelRunner, PendingStep
from pagoda.runner.torch_profiler import RankProfiler
from pagoda.executor.features import driver_features
from pagoda.interfaces.attention import AttentionBackend
from pagoda.interfaces.model import CausalLM
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

if TYPE_CHECKING:
    from pagoda.engine_core.parts import EngineParts

logger = logging.getLogger("pagoda")


class Executor(ABC):
    """Runs scheduled steps; ``runner`` is this process's ModelRunner (rank 0's)."""

    runner: ModelRunner
    profiler: RankProfiler | None = None  # this process's rank's, made by the first profile()

    @abstractmethod
    def launch(self, out: SchedulerOutput, block_tables: list[list[int]], prev: PendingStep | None) -> PendingStep:
        """Queue one step on every rank; see :meth:`ModelRunner.launch`."""

    @abstractmethod
    def release(self, request_id: str) -> None:
        """Forget a finished request on every rank."""

    def shutdown(self) -> None:
        """Stop the other ranks, if any (idempotent); a running profiler writes its trace first."""
        if self.profiler is not None:
            self.profiler.close()

    def profile(self, directory: str | None) -> None:
        """Start the torch profiler on every rank, the traces to ``directory``; None: stop it, and return once
        every rank wrote its trace (pagoda.runner.torch_profiler). Here: this process's rank."""
        if self.profiler is None:
            self.profiler = RankProfiler(self.runner.tp.rank)
        self.profiler.switch(directory)


class UniprocExecutor(Executor):
    """One rank: the runner's own methods, nothing in between."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.launch = runner.launch  # bound methods: no extra call per step
        self.release = runner.release

    def launch(self, out, block_tables, prev):  # replaced per instance in __init__
        return self.runner.launch(out, block_tables, prev)

    def release(self, request_id: str) -> None:  # replaced per instance in __init__
        self.runner.release(request_id)


def make_executor(parts: "EngineParts") -> Executor:
    """The driver's executor: its runner, plus the worker ranks when there are any."""
    runner = make_runner(parts.config, parts.platform, parts.attention, parts.model, parts.kv_caches,
                         parts.max_model_len, parts.tp, driver_features(parts), parts.pp)
    if parts.workers is None:
        return UniprocExecutor(runner)
    from pagoda.executor.multiproc import MultiprocExecutor

    return MultiprocExecutor(runner, parts.workers)


def make_runner(config: EngineConfig, platform: Platform, attention: AttentionBackend, model: CausalLM,
                kv_caches: list[torch.Tensor], max_model_len: int, tp: TensorParallel,
                features: list[StepFeature], pp: PipelineParallel = WHOLE) -> ModelRunner:
    """A ModelRunner with its step features and its graphs captured (each rank calls this the same way)."""
    runner = ModelRunner(model, attention, platform, kv_caches, config.block_size, config.seed, tp, features, pp)
    if use_graphs(config, platform, attention):
        runner.capture_graphs(max_model_len, config.max_num_seqs)
    return runner
