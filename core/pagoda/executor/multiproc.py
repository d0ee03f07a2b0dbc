"""MultiprocExecutor: rank 0 runs in the engine core's process and drives the worker ranks.

Each step is encoded once (:class:`~pagoda.executor.messages.StepEncoder`), sent to every
worker, then launched on rank 0's own runner; the ranks meet in the layers' collectives. The
tokens come from rank 0 (its PendingStep), so the engine core's overlapped loop is unchanged;
under pipeline parallelism rank 0 runs the first stage and the tokens come back from the last
(:class:`~pagoda.executor.pipeline.RemoteStep`).
"""

from __future__ import annotations

import time
from typing import Callable

from pagoda.runner.model_runner import ModelRunner, PendingStep
from pagoda.executor import messages
from pagoda.executor.base import Executor
from pagoda.executor.pipeline import RemoteStep, ResultReader
from pagoda.executor.workers import WorkerGroup
from pagoda.interfaces.scheduler import SchedulerOutput

PROFILE_REPLY_S = 300.0  # a worker writing a long trace


class MultiprocExecutor(Executor):
    def __init__(self, runner: ModelRunner, workers: WorkerGroup) -> None:
        self.runner = runner
        self.workers = workers
        self.encoder = messages.StepEncoder()
        self.results = ResultReader(workers.results, workers.check) if runner.pp.size > 1 else None
        self.steps = 0  # steps launched (the last pipeline stage numbers its results alike)

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes this executor spawned (none under torchrun)."""
        return [proc.pid for proc in self.workers.procs.values()]

    def launch(self, out: SchedulerOutput, block_tables: list[list[int]], prev: PendingStep | None) -> PendingStep:
        self.workers.check()
        self.workers.send(messages.encode(self.encoder.step(out, block_tables, prev is not None)))
        pending = self._guarded(lambda: self.runner.launch(out, block_tables, prev))
        self.steps += 1
        if self.results is not None:  # pipeline parallel: the last stage samples
            pending = RemoteStep(pending.requests, self.results, self.steps - 1)
            read = pending._read
            pending._read = lambda: self._guarded(read)
            return pending
        wait = pending._wait
        pending._wait = lambda: self._guarded(wait)  # the device (and its collectives) are waited on here
        return pending

    def _guarded(self, fn: Callable):
        """Run ``fn`` (which may wait on collectives); a failure becomes a WorkerFailedError."""
        self.workers.busy_since = time.monotonic()
        try:
            return fn()
        except Exception as exc:
            raise self.workers.error_after(exc) from exc
        finally:
            self.workers.busy_since = None

    def release(self, request_id: str) -> None:
        self.runner.release(request_id)
        self.encoder.release(request_id)

    def profile(self, directory: str | None) -> None:
        super().profile(directory)  # rank 0 first: a state error is raised before the workers hear of it
        errors = self._tell_workers(messages.Profile(directory))
        if errors and directory is not None:  # a start fails whole: no rank is left profiling
            self.profiler.stop(keep=False)
            self._tell_workers(messages.Profile(None, keep=False))  # the ranks that failed answer "not running"
        if errors:
            raise RuntimeError(f"profiling failed on a worker rank: {errors[0]}")

    def _tell_workers(self, message: messages.Profile) -> list[str]:
        """Send every worker ``message``; what went wrong on each that failed."""
        self.workers.send(messages.encode(message))
        return [frame.decode() for frame in self.workers.replies(PROFILE_REPLY_S, "answered").values() if frame]

    def shutdown(self) -> None:
        super().shutdown()
        self.runner.drop_graphs()  # every rank drops its graphs before the group is destroyed
        self.workers.shutdown()

