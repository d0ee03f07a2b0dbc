"""Executors: how the engine core runs a scheduled step on one rank or on all tensor-parallel ranks.

:class:`~pagoda.executor.base.UniprocExecutor` calls the ModelRunner directly (one device);
:class:`~pagoda.executor.multiproc.MultiprocExecutor` also sends each step to the worker
processes of the other ranks (:mod:`pagoda.executor.worker`), started on this host or by torchrun
(:mod:`pagoda.executor.workers`). See docs/distributed.md.
"""

from pagoda.executor.base import Executor, UniprocExecutor, make_executor

__all__ = ["Executor", "UniprocExecutor", "make_executor"]
