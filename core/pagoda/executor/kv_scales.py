"""``--calculate-kv-scales``: an FP8 KV cache's per-layer scales from the first real step.

A step feature (:mod:`pagoda.runner.features`): before the first step the engine runs for requests
(never the profiling or graph-capture runs, which see dummy tokens) it asks every attention layer
to set its scales from that step's keys and values (:func:`pagoda.attention.kv_quant.calibrate`),
before the layer stores them; after the forward pass it stops them. Tensor-parallel ranks agree
inside each layer on the largest magnitudes (an all-reduce of two floats, once), so every rank
stores with the scales of the whole layer, as one rank would.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from pagoda.layers.attention import Attention
from pagoda.runner.features import StepFeature

if TYPE_CHECKING:
    from pagoda.interfaces.model import CausalLM
    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner

logger = logging.getLogger("pagoda")


class KVScaleCalibration(StepFeature):
    """Calibrates the KV cache scales of ``model``'s attention layers on the first eager step."""

    def __init__(self, model: "CausalLM") -> None:
        self.layers = [m for m in model.modules() if isinstance(m, Attention)]
        self.armed = False
        self.done = not self.layers

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        if self.done or inputs.graph_size is not None:  # a replayed graph runs no layer code
            return
        tp = runner.tp
        agree = (lambda amax: dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=tp.group)) if tp.size > 1 else None
        for layer in self.layers:
            layer.kv_scales.calibrating, layer.kv_scales.agree = True, agree
        self.armed = True

    def after_forward(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor,
                      query_starts: list[int]) -> None:
        if not self.armed:
            return
        for layer in self.layers:
            layer.kv_scales.calibrating, layer.kv_scales.agree = False, None
        self.armed, self.done = False, True
        if runner.tp.rank == 0:  # one host read, once
            k, v = (torch.stack([getattr(layer.kv_scales, name) for layer in self.layers]).tolist()
                    for name in ("k_scale", "v_scale"))
            logger.info("FP8 KV cache scales calibrated on the first step: k %.4g..%.4g, v %.4g..%.4g",
                        min(k), max(k), min(v), max(v))
