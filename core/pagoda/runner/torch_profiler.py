"""Torch profiler traces of the engine's steps on every tensor-parallel rank, as vLLM's ``start_profile``
and ``stop_profile``: ``LLM.start_profile()`` / ``LLM.stop_profile()``, or ``POST /start_profile`` and
``POST /stop_profile`` on a server, with ``PAGODA_TORCH_PROFILER_DIR`` naming the folder the traces go
to. Each rank writes one trace when profiling stops (``rank{r}.<pid>.<ms>.pt.trace.json.gz``: host
and device activity, for Perfetto or chrome://tracing); a rank's device kernels show how long it
waited in each collective for the others.
"""

from __future__ import annotations

import os

import torch

from pagoda import envs


def profiler_dir() -> str:
    """The traces' folder, from the environment; an error naming the variable if unset."""
    directory = envs.TORCH_PROFILER_DIR.get()
    if not directory:
        raise RuntimeError(f"profiling needs {envs.TORCH_PROFILER_DIR.name} set to the folder the traces go to "
                           "(for a server: in its environment when it starts)")
    return directory


class RankProfiler:
    """One rank's torch profiler: :meth:`start`, then :meth:`stop`, which writes the trace."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._profile: torch.profiler.profile | None = None

    def start(self, directory: str) -> None:
        if self._profile is not None:
            raise RuntimeError("the profiler is already running: stop it first")
        os.makedirs(directory, exist_ok=True)
        handler = torch.profiler.tensorboard_trace_handler(directory, worker_name=f"rank{self.rank}", use_gzip=True)
        self._profile = torch.profiler.profile(activities=sorted(torch.profiler.supported_activities(), key=str),
                                               on_trace_ready=handler)
        self._profile.start()

    def stop(self, keep: bool = True) -> None:
        """Stop profiling and write the trace; ``keep=False``: write nothing (a start rolled back)."""
        if self._profile is None:
            raise RuntimeError("the profiler is not running: start it first")
        profile, self._profile = self._profile, None
        if not keep:
            profile.on_trace_ready = None
        profile.stop()  # on_trace_ready writes the trace

    def close(self) -> None:
        """At shutdown: stop profiling if it runs, writing the trace (nothing is lost to an engine that
        stops while profiling)."""
        if self._profile is not None:
            self.stop()

    def switch(self, directory: str | None, keep: bool = True) -> None:
        """:meth:`start` with a folder, :meth:`stop` (``keep``) with None."""
        if directory is None:
            self.stop(keep)
        else:
            self.start(directory)
