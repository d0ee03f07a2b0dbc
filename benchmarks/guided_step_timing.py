"""Per-step timings inside an offline ``LLM`` (engine core in process), for benchmarks/guided_decoding.py.

:func:`probe_steps` wraps, for one run, the parts of a step:

- ``launch``: host time to queue a whole step (inputs, forward, logits, grammar mask, sampling);
- ``forward``: the model's forward pass (device time from CUDA events, host time to queue it);
- ``sample``: the sampler (device and host time);
- ``wait``: host time blocked reading a step's sampled tokens (near 0: the host is the bottleneck);
- guided steps: ``advance`` (matchers accept tokens; includes waiting for the in-flight step's
  tokens, also counted in ``wait``), ``fill`` (bitmask rows), ``apply`` (the bitmask's copy and
  the masking op; device time too) and ``mask`` (all of it).

Times are medians per call in ms; ``*_device_ms`` come from CUDA events (GPU only).

:func:`legacy_guided` switches the grammar path back to what it was before the bitmask work
(pageable host bitmask, unpack + masked_fill, xgrammar's default thread count), for an A/B in one process.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from guided_breakdown import PhaseTimer, instrument, unpack_apply


@contextmanager
def probe_steps(llm: Any, timings: dict[str, float]) -> Iterator[None]:
    """Time the steps run inside the ``with``; the medians per call land in ``timings``."""
    core = llm.engine.core
    runner, platform = core.runner, core.parts.platform
    timer = PhaseTimer(platform.device())
    timer.wrap(core.executor, "launch", "launch")
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
    def copy(tensors: list[torch.Tensor]) -> Callable[[], list[torch.Tensor]]:
        wait = copy_out(tensors)

        def timed_wait() -> list[torch.Tensor]:
            start = time.perf_counter()
            try:
                return wait()
            finally:
                waits.append(1e3 * (time.perf_counter() - start))

        return timed_wait

    return copy


@contextmanager
def legacy_guided(llm: Any) -> Iterator[None]:
    """Inside the ``with``, guided steps use the grammar path from before the bitmask work."""
    import xgrammar as xgr

    import pagoda.guided.runtime as runtime

    guided = llm.engine.core.runner.guided
    saved = (guided.host_buffer, runtime.apply_bitmask, {name: b.batch for name, b in guided.backends.items()})
    guided.host_buffer = lambda nbytes: torch.empty(nbytes, dtype=torch.uint8)  # pageable
    runtime.apply_bitmask = unpack_apply
    for backend in guided.backends.values():
        backend.batch = xgr.BatchGrammarMatcher(max_threads="auto")  # half of the host's hardware threads
    try:
        yield
    finally:
        guided._pageable = None  # the pageable buffer reused inside must not serve the pinned path after
        guided.host_buffer, runtime.apply_bitmask = saved[0], saved[1]
        for name, batch in saved[2].items():
            guided.backends[name].batch = batch
