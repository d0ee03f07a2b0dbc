"""The model runner's pooling step: run the whole prompts, pool them, copy the results to the host.

Under ``runner="pooling"`` every scheduled request is a pooling request whose prompt runs whole
in this step (chunked prefill is off). The runner's :class:`PoolingStep` feature runs each step
in the runner's place (:func:`launch_pooling`): it returns a :class:`PendingPooling` whose ``result()`` carries each
request's pooled values, and the engine core finishes those requests at launch (their KV
blocks were scratch space for this one step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from pagoda.runner.features import StepFeature
from pagoda.runner.model_runner import PendingStep, RunnerOutput
from pagoda.interfaces.model import ForwardContext
from pagoda.pooling.config import PoolerConfig
from pagoda.pooling.pooler import PooledBatch, Pooler, PoolingRow

if TYPE_CHECKING:
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner
    from pagoda.interfaces.scheduler import SchedulerOutput


class PendingPooling(PendingStep):
    """A launched pooling step: its pooled values are on the device until :meth:`result`."""

    def __init__(self, batch: PooledBatch, wait: Callable[[], list[torch.Tensor]]) -> None:
        super().__init__([], None, wait, {})
        self.batch = batch
        self.pooled_request_ids = tuple(batch.request_ids)
        self._copy = wait

    def result(self) -> RunnerOutput:
        return RunnerOutput(pooled=self.batch.split(self._copy()[0]))


class PoolingStep(StepFeature):
    """Under runner "pooling": every step runs whole prompts and pools them; nothing is sampled."""

    def __init__(self, config: PoolerConfig, model: torch.nn.Module) -> None:
        self.pooler = Pooler(config, getattr(model, "pooled_head", None))  # a classifier's head, if it has one

    def run_step(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> PendingPooling:
        return launch_pooling(runner, out, inputs, self.pooler)


def launch_pooling(runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs",
                   pooler: Pooler) -> PendingPooling:
    """Run the model over the step's prompts and queue the pooled results' copy to the host."""
    rows = pooling_rows(out, inputs.query_starts)
    metadata = runner.attention.prepare(inputs.metadata)
    fwd = ForwardContext(metadata, runner.kv_caches, segment_ids(out, inputs.query_starts, runner.device))
    hidden = runner.model(inputs.input_ids, inputs.positions, fwd)  # [num_tokens, hidden]
    batch = pooler(hidden, rows)
    return PendingPooling(batch, runner.platform.copy_to_host_async([batch.data]))


def pooling_rows(out: "SchedulerOutput", starts: list[int]) -> list[PoolingRow]:
    """One row per scheduled request; each must be a pooling request computing its whole prompt."""
    rows = []
    for i, (req, n) in enumerate(zip(out.requests, out.num_tokens)):
        if req.pooling_params is None or req.num_computed_tokens != 0 or n != req.num_tokens:
            raise RuntimeError(f"request {req.request_id} is not a whole-prompt pooling request; the pooling "
                               "runner needs chunked prefill and prefix caching off (configure_runner sets them)")
        rows.append(PoolingRow(req.request_id, starts[i], starts[i + 1], req.pooling_params))
    return rows


def segment_ids(out: "SchedulerOutput", starts: list[int], device: torch.device) -> torch.Tensor | None:
    """[num_tokens] int64 token types (1 from each pair's second text on), or None without pairs."""
    pairs = [(i, req.pooling_params.segment_start) for i, req in enumerate(out.requests)
             if req.pooling_params is not None and req.pooling_params.segment_start is not None]
    if not pairs:
        return None
    types = np.zeros(starts[-1], dtype=np.int64)
    for i, segment_start in pairs:
        types[starts[i] + segment_start : starts[i + 1]] = 1
    return torch.from_numpy(types).to(device)
