"""Per-step timings inside an offline ``LLM`` (engine core in process), for benchmarks/guided_decoding.py.

:func:`probe_steps` wraps, for one run, the parts of a step:

- ``step``: host time of the engine core's whole step (schedule, launch, read the step before);
- ``launch``: host time to queue a step (inputs, forward, logits, and for unguided steps the
  sampling; a guided step's sampling waits for its bitmask: ``sample_later``);
- ``forward``: the model's forward pass (device time from CUDA events, host time to queue it);
- ``sample``: the sampler (device and host time);
- ``wait``: host time blocked reading a step's sampled tokens (near 0: the host is the bottleneck);
- guided steps: ``start`` (in the launch: the matchers advance, ``advance``, which includes waiting
  for the in-flight step's tokens, also counted in ``wait``; then the fill is handed to the worker
  thread), ``fill`` (bitmask rows, on the worker thread, overlapping what follows),
  ``sample_later`` (in the next launch, or when the tokens are read: waiting for the fill,
  ``job_wait``, then queueing ``apply``, the bitmask's copy and the masking op, device time
  too, and the sampling).

Times are medians per call in ms (``*_mean_ms``: means); ``*_device_ms`` come from CUDA events
(GPU only).

:func:`serial_guided` switches guided steps to the path before the grammar worker thread (the
bitmask filled in the launch, by xgrammar's ``fill_threads()`` threads), :func:`legacy_guided` to
the path before the bitmask work (also pageable host bitmask, unpack + masked_fill, xgrammar's
default thread count), each for an A/B in one process.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from guided_breakdown import PhaseTimer, instrument, unpack_apply, xgrammar_fill


@contextmanager
def probe_steps(llm: Any, timings: dict[str, float]) -> Iterator[None]:
    """Time the steps run inside the ``with``; the medians per call land in ``timings``."""
    core = llm.engine.core
    runner, platform = core.runner, core.parts.platform
    timer = PhaseTimer(platform.device())
    timer.wrap(core, "step", "step")
    timer.wrap(core.executor, "launch", "launch")
    timer.wrap(runner, "_sample_later", "sample_later")
    timer.wrap(runner, "_forward", "forward", device=True)
    timer.wrap(runner.sampler, "sample", "sample", device=True)
    timer.patch(platform, "copy_to_host_async", _timed_waits(platform.copy_to_host_async, timer.ms.setdefault("wait", [])))
    if runner.guided is not None and runner.guided.backends:
        instrument(runner.guided, timer)
    try:
        yield
    finally:
        timer.restore()
        timings.update(timer.summary())


def _timed_waits(copy_out: Callable, waits: list[float]) -> Callable:
    """``copy_out`` whose returned wait function records how long it blocks."""
    def copy(tensors: list[torch.Tensor], beside: bool = False) -> Callable[[], list[torch.Tensor]]:
        wait = copy_out(tensors, beside)

        def timed_wait() -> list[torch.Tensor]:
            start = time.perf_counter()
            try:
                return wait()
            finally:
                waits.append(1e3 * (time.perf_counter() - start))

        return timed_wait

    return copy


@contextmanager
def serial_guided(llm: Any) -> Iterator[None]:
    """Inside the ``with``, guided steps fill their bitmask in the launch, with xgrammar's threads."""
    from pagoda.guided.xgrammar_backend import fill_threads

    guided = llm.engine.core.runner.guided
    with _fill_by_xgrammar(guided, fill_threads()):
        guided.worker = False
        try:
            yield
        finally:
            guided.worker = True


@contextmanager
def legacy_guided(llm: Any) -> Iterator[None]:
    """Inside the ``with``, guided steps use the grammar path from before the bitmask work."""
    import pagoda.guided.runtime as runtime

    guided = llm.engine.core.runner.guided
    saved = (guided.host_buffer, runtime.apply_bitmask)
    guided.host_buffer = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8)  # pageable
    runtime.apply_bitmask = unpack_apply
    try:
        with serial_guided(llm), _fill_by_xgrammar(guided, "auto"):  # half of the host's hardware threads
            yield
    finally:
        guided._pageable = None  # the pageable buffer reused inside must not serve the pinned path after
        guided.host_buffer, runtime.apply_bitmask = saved


@contextmanager
def _fill_by_xgrammar(guided: Any, threads: int | str) -> Iterator[None]:
    """Inside the ``with``, the backends fill every batch with ``BatchGrammarMatcher(max_threads=threads)``."""
    backends = list(guided.backends.values())
    saved = [backend.__dict__.get("fill_bitmasks") for backend in backends]
    for backend in backends:
        backend.fill_bitmasks = xgrammar_fill(threads)
    try:
        yield
    finally:
        for backend, fill in zip(backends, saved):
            if fill is None:
                del backend.fill_bitmasks
            else:
                backend.fill_bitmasks = fill
