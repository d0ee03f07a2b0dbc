"""Adapter weights on the host (an LRU of ``max_cpu_loras`` copies) and in the device slots (``max_loras``).

A host copy is one flat buffer in the slot layout (pinned where the platform pins), built once from the
adapter's files; moving an adapter into a device slot is one copy of it, queued on the device's stream
before the step that needs it (so a step can swap adapters in without waiting for the others). The
device slots are kept by least recent use: a step takes the slots of adapters it does not use. An adapter
whose host copy was dropped is read from its folder again when a step needs it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch

from pagoda.lora_request import LoRARequest


class AdapterSlots:
    """The host copies and the device slots of one rank (module docstring)."""

    def __init__(self, arena: torch.Tensor, max_cpu_loras: int, build: Callable[[LoRARequest], torch.Tensor]) -> None:
        self.arena = arena  # [max_loras, slot numel] on the device
        self.max_cpu_loras = max_cpu_loras
        self._build = build  # an adapter's host copy, read and checked (raises LoRAAdapterError)
        self.host: OrderedDict[LoRARequest, torch.Tensor] = OrderedDict()  # least recently used first
        self.slot_of: OrderedDict[LoRARequest, int] = OrderedDict()  # least recently used first
        self.loads = 0  # host copies built (adapters read from their folders)
        self.swaps = 0  # adapters copied into a device slot

    @property
    def num_slots(self) -> int:
        return self.arena.shape[0]

    def host_copy(self, lora: LoRARequest) -> torch.Tensor:
        """The adapter's host copy: kept, or built (which reads its files; nothing is kept if that fails)."""
        copy = self.host.get(lora)
        if copy is not None:
            self.host.move_to_end(lora)
            return copy
        copy = self._build(lora)
        self.loads += 1
        self.host[lora] = copy
        while len(self.host) > self.max_cpu_loras:
            self.host.popitem(last=False)
        return copy

    def forget(self, lora: LoRARequest) -> None:
        """Drop the adapter's host copy and its slot (the slot's weights stay until another adapter takes it)."""
        self.host.pop(lora, None)
        self.slot_of.pop(lora, None)

    def activate(self, loras: set[LoRARequest]) -> dict[LoRARequest, int]:
        """A device slot for each of ``loras`` (at most ``num_slots`` of them), copying in those not there."""
        if len(loras) > self.num_slots:
            raise RuntimeError(f"a step uses {len(loras)} adapters but there are {self.num_slots} slots; the "
                               "scheduler must not schedule more distinct adapters than max_loras")
        for lora in loras & self.slot_of.keys():
            self.slot_of.move_to_end(lora)
        for lora in loras - self.slot_of.keys():
            slot = self._free_slot(loras)
            self.arena[slot].copy_(self.host_copy(lora), non_blocking=True)
            self.slot_of[lora] = slot
            self.swaps += 1
        return {lora: self.slot_of[lora] for lora in loras}

    def _free_slot(self, needed: set[LoRARequest]) -> int:
        taken = set(self.slot_of.values())
        free = next((slot for slot in range(self.num_slots) if slot not in taken), None)
        if free is not None:
            return free
        victim = next(lora for lora in self.slot_of if lora not in needed)  # least recently used first
        return self.slot_of.pop(victim)
