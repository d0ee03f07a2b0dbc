"""The Executor interface, the single-device executor, and the runner every rank builds alike."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch

from pagoda.config import EngineConfig
from pagoda.distributed.parallel import TensorParallel
from pagoda.engine.model_runner import ModelRunner, PendingStep
from pagoda.engine.torch_profiler import RankProfiler
from pagoda.guided.runtime import guided_sampling_for
from pagoda.interfaces.attention import AttentionBackend
from pagoda.interfaces.model import CausalLM
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

if TYPE_CHECKING:
    from pagoda.engine.builder import EngineParts

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
        every rank wrote its trace (pagoda.engine.torch_profiler). Here: this process's rank."""
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
                         parts.max_model_len, parts.tp)
    runner.guided = guided_sampling_for(parts)  # rank 0 samples, so only its runner applies grammars
    if parts.pooler_config is not None:  # runner "pooling" (single rank: tensor parallelism is refused)
        from pagoda.pooling.runner import build_pooler

        runner.pooler = build_pooler(parts.pooler_config, parts.model)
    if parts.workers is None:
        return UniprocExecutor(runner)
    from pagoda.executor.multiproc import MultiprocExecutor

    return MultiprocExecutor(runner, parts.workers)


def make_runner(config: EngineConfig, platform: Platform, attention: AttentionBackend, model: CausalLM,
                kv_caches: list[torch.Tensor], max_model_len: int, tp: TensorParallel) -> ModelRunner:
    """A ModelRunner with its decode graphs captured (each rank calls this the same way)."""
    runner = ModelRunner(model, attention, platform, kv_caches, config.block_size, config.seed, tp)
    if use_graphs(config, platform, attention):
        runner.capture_decode_graphs(max_model_len, config.max_num_seqs)
    return runner


def use_graphs(config: EngineConfig, platform: Platform, attention: AttentionBackend) -> bool:
    """Device graphs for decode steps, unless --enforce-eager or the backend/platform cannot."""
    if config.enforce_eager or not platform.supports_graphs() or config.runner == "pooling":
        return False  # pooling steps are whole prompts, never the decode steps graphs capture
    if not attention.supports_graphs:
        logger.info("Attention backend %s cannot be captured in device graphs: decode runs eagerly",
                    type(attention).__name__)
        return False
    return True
