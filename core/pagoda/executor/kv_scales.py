"""``--calculate-kv-scales``: an FP8 KV cache's per-layer scales from the first real step.

A step feature (:mod:`pagoda.runner.features`): before the first step the engine runs for requests
(never the profiling or graph-capture runs, which see dummy tokens) it asks every attention layer
to set its scales from that step's keys and values (:func:`pagoda.attention.kv_quant.calibrate`);
after the forward pass it stops them. Tensor-parallel ranks then agree on the largest scale of each
layer, so the scales are those of the whole layer, as on one rank.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

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
        for layer in self.layers:
            layer.kv_scales.calibrating = True
        self.armed = True

    def after_forward(self, runner: "ModelRunner", out: "SchedulerOutput", hidden: torch.Tensor,
                      query_starts: list[int]) -> None:
        if not self.armed:
            return
        scales = [s for layer in self.layers for s in (layer.kv_scales.k_scale, layer.kv_scales.v_scale)]
        for layer in self.layers:
            layer.kv_scales.calibrating = False
        self.armed, self.done = False, True
        merged = runner.tp.max_floats(torch.stack(scales).tolist(), scales[0].device)  # one host sync, once
        for scale, value in zip(scales, merged):
            scale.fill_(value)
        if runner.tp.rank == 0:
            logger.info("FP8 KV cache scales calibrated on the first step: k %.4g..%.4g, v %.4g..%.4g",
                        min(merged[0::2]), max(merged[0::2]), min(merged[1::2]), max(merged[1::2]))
