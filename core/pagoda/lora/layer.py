"""The LoRA delta of one linear layer (a :class:`pagoda.layers.linear.OutputDelta`) and attaching it.

Each adapted layer reads its matrices from every device slot (views of the one slot arena) and the
step's :class:`~pagoda.lora.plan.LoRAPlan`, which the LoRA step feature sets before each forward pass
(:class:`StepLoRA`, shared by all layers). Without a plan (no request of the step has an adapter) the
layer adds nothing and launches nothing.
"""

from __future__ import annotations

import torch

from pagoda.layers.linear import LinearBase
from pagoda.lora.layout import LayerSlot, SlotLayout
from pagoda.lora.ops import LoRAKernel
from pagoda.lora.plan import LoRAPlan


class StepLoRA:
    """What the step being run needs of LoRA: its plan (None: no adapter in the step)."""

    def __init__(self) -> None:
        self.plan: LoRAPlan | None = None


class LoRALinear:
    """Adds the adapters' ``x A^T B^T`` of the step's rows to one layer's output."""

    def __init__(self, slot: LayerSlot, arena: torch.Tensor, step: StepLoRA, kernel: LoRAKernel) -> None:
        self.a = slot.a_view(arena)  # [slots, S, R, K]
        self.b = slot.b_view(arena)  # [slots, N, R]
        self.host_slices = slot.slices  # (offset, size) of each output slice
        self.slices = torch.tensor(self.host_slices, dtype=torch.int32, device=arena.device)  # [S, 2]
        self.step = step
        self.kernel = kernel

    def add_to(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        plan = self.step.plan
        if plan is None:
            return y
        return self.kernel(y, x.contiguous(), self.a, self.b, self.slices, self.host_slices, plan)


def attach(model: torch.nn.Module, layout: SlotLayout, arena: torch.Tensor, step: StepLoRA,
           kernel: LoRAKernel) -> list[LinearBase]:
    """Give every layer of ``layout`` its LoRA delta; returns the layers."""
    modules = dict(model.named_modules())
    layers = []
    for path, slot in layout.layers.items():
        layer = modules[path]
        layer.attach_delta(LoRALinear(slot, arena, step, kernel))
        layers.append(layer)
    return layers
