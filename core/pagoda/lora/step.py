"""LoRA adapters as a step feature: each step's requests run with their own adapters, in one batch.

Built on every tensor-parallel rank (:mod:`pagoda.executor.features`): it lays out the adapter slots of the
model's linear layers (this rank's part), attaches a LoRA delta to each layer, and before each forward pass
(``prepare_inputs``) puts the step's adapters into device slots and sets the step's plan: which rows run
with which slot. A decode step replayed as a device graph reads each row's slot from a static buffer,
written here before the replay (the graphs were captured with LoRA rows, all slots -1 then).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from pagoda.interfaces.platform import Platform
from pagoda.lora.layer import StepLoRA, attach
from pagoda.lora.layout import slot_layout
from pagoda.lora.ops import select_kernel
from pagoda.lora.peft_files import read_peft_adapter
from pagoda.lora.placement import place_adapter
from pagoda.lora.plan import NO_SLOT, build_plan, graph_plan
from pagoda.lora.slots import AdapterSlots
from pagoda.lora_request import LoRARequest
from pagoda.runner.features import StepFeature

if TYPE_CHECKING:
    from pagoda.config import EngineConfig
    from pagoda.interfaces.model import CausalLM
    from pagoda.interfaces.scheduler import SchedulerOutput
    from pagoda.runner.batch import StepInputs
    from pagoda.runner.model_runner import ModelRunner


class LoRAStep(StepFeature):
    """Runs each request of a step with its adapter (module docstring)."""

    def __init__(self, model: "CausalLM", config: "EngineConfig", platform: Platform, dtype: torch.dtype) -> None:
        self.max_rank = config.max_lora_rank
        self.max_loras = config.max_loras
        self.model_name = type(model).__name__
        self.targets = model.lora_targets()
        self.layout = slot_layout(model, self.max_rank, self.targets)
        self.platform, self.device, self.dtype = platform, platform.device(), dtype
        arena = torch.zeros(config.max_loras, self.layout.numel, dtype=dtype, device=self.device)  # the device slots
        kernel, self.groups = select_kernel(self.device)
        self.step = StepLoRA()
        attach(model, self.layout, arena, self.step, kernel)
        self.slots = AdapterSlots(arena, config.max_cpu_loras or config.max_loras, self.host_copy)
        self.graph_slots = torch.full((max(config.max_num_seqs, 1),), NO_SLOT, dtype=torch.int32, device=self.device)
        self._dirty_rows = 0  # leading entries of graph_slots that may hold a slot
        self.step.plan = graph_plan(self.graph_slots)  # what decode graphs are captured with

    def host_copy(self, lora: LoRARequest) -> torch.Tensor:
        """Read the adapter's files and lay it out as one slot ([slot numel]); LoRAAdapterError if it cannot
        be served on this model."""
        modules = read_peft_adapter(lora, self.max_rank)
        itemsize = torch.tensor([], dtype=self.dtype).element_size()
        out = self.platform.host_buffer(self.layout.numel * itemsize).view(self.dtype)
        out.zero_()
        place_adapter(lora, modules, self.layout, self.targets, self.model_name, out)
        return out

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        loras = [req.lora_request for req in out.requests]
        used = {lora for lora in loras if lora is not None}
        slot_of = self.slots.activate(used) if used else {}
        slots = [NO_SLOT if lora is None else slot_of[lora] for lora in loras]
        if inputs.graph_size is not None:
            self._stage_graph_slots(slots, inputs.graph_size)
        else:
            self.step.plan = build_plan(slots, out.num_tokens, self.device, self.groups)

    def _stage_graph_slots(self, slots: list[int], size: int) -> None:
        """Write the rows' slots (padding rows: -1) into the buffer the decode graphs read."""
        dirty = max((i + 1 for i, slot in enumerate(slots) if slot != NO_SLOT), default=0)
        if dirty == 0 and self._dirty_rows == 0:
            return  # the buffer already says "no adapter" for every row
        host = self.platform.host_buffer(4 * size).view(torch.int32)
        host.numpy()[:] = np.asarray(slots + [NO_SLOT] * (size - len(slots)), dtype=np.int32)
        self.graph_slots[:size].copy_(host, non_blocking=True)
        self._dirty_rows = max(dirty, self._dirty_rows if self._dirty_rows > size else 0)
