"""The engine core's loop under pipeline parallelism: up to P steps in flight, one per stage.

Each step holds the requests of one group (:class:`~pagoda.scheduler.virtual_engines.VirtualEngines`).
A step is launched as soon as a group that is not in flight has work, so while the last stage
samples step N the first already runs step N+P-1; the oldest step's tokens are read when P steps
are in flight or nothing else can be launched. Reading a step frees its group to schedule again.
The overlapped single-stage loop (``EngineCore.step``) fills a step's placeholders from the step
before on the device; here a request's next step always starts from tokens the host has read.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from pagoda.messages import EngineCoreOutput
from pagoda.scheduler.virtual_engines import VirtualEngines

if TYPE_CHECKING:
    from pagoda.engine_core.core import EngineCore, InflightStep


class PipelineLoop:
    """``EngineCore.step`` for ``depth`` pipeline stages."""

    def __init__(self, core: "EngineCore", depth: int) -> None:
        self.core, self.depth = core, depth
        self.scheduler: VirtualEngines = core.scheduler
        self.inflight: deque[tuple[int, "InflightStep"]] = deque()  # (group, step), oldest first
        self.most_in_flight = 0  # the most steps that were in flight at once (for tests and logs)

    @property
    def busy(self) -> bool:
        return bool(self.inflight)

    def step(self) -> list[EngineCoreOutput]:
        """Launch the next group's step if one can run, reading the oldest step first when the pipeline is full or
        when nothing can be launched."""
        outputs: list[EngineCoreOutput] = []
        if len(self.inflight) >= self.depth:
            outputs += self._read_oldest()
        scheduled = self.scheduler.schedule()
        if not scheduled.is_empty():
            self.inflight.append((self.scheduler.last_group, self.core._launch(scheduled)))
            self.most_in_flight = max(self.most_in_flight, len(self.inflight))
        elif self.inflight:
            outputs += self._read_oldest()
        return outputs

    def _read_oldest(self) -> list[EngineCoreOutput]:
        group, step = self.inflight.popleft()
        outputs = self.core._resolve(step)
        self.scheduler.step_done(group)
        return outputs
