"""LoRA adapters as a step feature: each step's requests run with their own adapters, in one batch.

Built on every rank (:mod:`pagoda.executor.features`): it lays out the adapter slots of the model's linear
layers (this rank's part: its tensor-parallel slice of its pipeline stage's layers), attaches a LoRA delta to each layer, and before each forward pass
(``prepare_inputs``) puts the step's adapters into device slots and sets the step's plan: which rows run
with which slot. Decode steps have two sets of device graphs: the runner's, captured without LoRA (no plan),
for steps where no request has an adapter, and this feature's, captured with the graph plan, whose static
buffer is written here before each replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from pagoda.interfaces.platform import Platform
from pagoda.layers.pipeline import missing_paths
from pagoda.lora.layer import StepLoRA, attach
from pagoda.lora.layout import slot_layout
from pagoda.lora.ops import select_kernel
from pagoda.lora.peft_files import read_peft_adapter
from pagoda.lora.placement import place_adapter
from pagoda.lora.plan import NO_SLOT, build_plan, graph_buffer_size, graph_plan, write_graph_plan
from pagoda.lora.slots import AdapterSlots
from pagoda.lora_request import LoRARequest
from pagoda.runner.features import StepFeature
from pagoda.runner.graphs import DecodeGraphs

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
        self.missing = missing_paths(model)  # the layers other pipeline stages hold
        self.platform, self.device, self.dtype = platform, platform.device(), dtype
        arena = torch.zeros(config.max_loras, self.layout.numel, dtype=dtype, device=self.device)  # the device slots
        kernel, self.groups = select_kernel(self.device)
        self.step = StepLoRA()
        attach(model, self.layout, arena, self.step, kernel)
        self.slots = AdapterSlots(arena, config.max_cpu_loras or config.max_loras, self.host_copy)
        self.graph_rows = max(config.max_num_seqs, 1)
        size = graph_buffer_size(self.graph_rows, self.max_loras)
        self.graph_buffer = torch.full((size,), NO_SLOT, dtype=torch.int32, device=self.device)

    def capture_graphs(self, runner: "ModelRunner", max_model_len: int, max_num_seqs: int) -> None:
        """Decode graphs with LoRA rows (the runner's were captured without: ``step.plan`` None)."""
        graphs = runner.decode_graphs(AdapterGraphs, max_model_len, max_num_seqs)
        self.step.plan = self.graph_plan = graph_plan(self.graph_buffer, self.graph_rows, self.max_loras)
        try:
            graphs.capture()
        finally:
            self.step.plan = None
        self.step_graphs = graphs

    def host_copy(self, lora: LoRARequest) -> torch.Tensor:
        """Read the adapter's files and lay it out as one slot ([slot numel]); LoRAAdapterError if it cannot
        be served on this model."""
        modules = read_peft_adapter(lora, self.max_rank)
        itemsize = torch.tensor([], dtype=self.dtype).element_size()
        out = self.platform.host_buffer(self.layout.numel * itemsize).view(self.dtype)
        out.zero_()
        place_adapter(lora, modules, self.layout, self.targets, self.model_name, out, self.missing)
        return out

    def prepare_inputs(self, runner: "ModelRunner", out: "SchedulerOutput", inputs: "StepInputs") -> None:
        loras = [req.lora_request for req in out.requests]
        used = {lora for lora in loras if lora is not None}
        slot_of = self.slots.activate(used) if used else {}
        slots = [NO_SLOT if lora is None else slot_of[lora] for lora in loras]
        # A replayed step gets the plan its graphs were captured with (the graph plan, or None for the runner's
        # graphs without LoRA rows): a CUDA graph never reads it again, but a platform whose replay reruns the
        # step does.
        if inputs.graph_size is None:
            self.step.plan = build_plan(slots, out.num_tokens, self.device, self.groups)
        elif inputs.graphs is self.step_graphs:
            host = self.platform.host_buffer(4 * self.graph_buffer.numel()).view(torch.int32)
            write_graph_plan(host.numpy(), slots, self.graph_rows, self.max_loras)
            self.graph_buffer.copy_(host, non_blocking=True)
            self.step.plan = self.graph_plan
        else:
            self.step.plan = None


class AdapterGraphs(DecodeGraphs):
    """Decode graphs captured with LoRA rows: they take the decode steps where some request has an adapter."""

    def size_for(self, out: "SchedulerOutput") -> int | None:
        if all(req.lora_request is None for req in out.requests):
            return None
        return super().size_for(out)

    def stage(self, out: "SchedulerOutput", block_tables: list[list[int]], size: int) -> "StepInputs":
        inputs = super().stage(out, block_tables, size)
        inputs.graphs = self
        return inputs
