"""The engine core's side of LoRA: which adapters it knows, checked before a request that names one is queued.

An adapter is known by its id from the first request (or load) that names it until it is unloaded; a
request naming a known id must name the same adapter. Checking an adapter reads it (its host copy, on the
driver's rank), so a missing, corrupt or mismatched adapter fails its request at once, with nothing of it
kept; a request whose adapter loads runs as soon as a slot is free (:mod:`pagoda.lora.admission`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pagoda.errors import RequestError
from pagoda.lora.admission import limit_adapters
from pagoda.lora.peft_files import LoRAAdapterError
from pagoda.lora.step import LoRAStep
from pagoda.lora_request import LoRARequest

if TYPE_CHECKING:
    from pagoda.interfaces.scheduler import Scheduler
    from pagoda.runner.model_runner import ModelRunner


class EngineAdapters:
    """The adapters an engine core knows, by id."""

    def __init__(self, step: LoRAStep) -> None:
        self.step = step
        self.known: dict[int, LoRARequest] = {}

    def check(self, lora: LoRARequest) -> None:
        """Raise RequestError (LoRAAdapterError) unless ``lora`` can run: its id free or its own, its files
        readable and matching the model."""
        known = self.known.get(lora.lora_int_id)
        if known is not None and known != lora:
            raise LoRAAdapterError(f"LoRA adapter id {lora.lora_int_id} is already {known.lora_name!r} "
                                   f"({known.lora_path}); give {lora.lora_name!r} an id of its own")
        same_name = next((k for k in self.known.values() if k.lora_name == lora.lora_name and k != lora), None)
        if same_name is not None:
            raise LoRAAdapterError(f"a LoRA adapter named {lora.lora_name!r} is already loaded (id "
                                   f"{same_name.lora_int_id}, {same_name.lora_path}); unload it or pick another name")
        self.step.slots.host_copy(lora)
        self.known[lora.lora_int_id] = lora

    def add(self, name: str, path: str, lora_id: int | None = None) -> LoRARequest:
        """Load an adapter ahead of its requests (``lora_id`` None: the next free id); loading a name again
        with the same folder returns the adapter loaded, with another folder is an error."""
        loaded = next((k for k in self.known.values() if k.lora_name == name), None)
        if loaded is not None and loaded.lora_path == path and lora_id in (None, loaded.lora_int_id):
            return loaded
        lora = LoRARequest(name, lora_id if lora_id is not None else max(self.known, default=0) + 1, path)
        self.check(lora)
        return lora

    def remove(self, lora_id: int) -> bool:
        """Forget an adapter (requests running with it finish with it); False if it was not loaded."""
        lora = self.known.pop(lora_id, None)
        if lora is None:
            return False
        self.step.slots.forget(lora)
        return True

    def list(self) -> list[list]:
        """The loaded adapters as ``[name, id, path]``."""
        return [[lora.lora_name, lora.lora_int_id, lora.lora_path] for lora in self.known.values()]


def engine_adapters(runner: "ModelRunner", scheduler: "Scheduler") -> EngineAdapters | None:
    """The engine core's adapters when its runner runs LoRA (the scheduler then keeps at most max_loras
    adapters running), else None."""
    step = runner.feature(LoRAStep)
    if step is None:
        return None
    limit_adapters(scheduler, step.max_loras)
    return EngineAdapters(step)


def refuse_without_lora(lora: LoRARequest | None) -> None:
    """A request names an adapter but the engine runs without LoRA."""
    if lora is not None:
        raise RequestError(f"the request names LoRA adapter {lora.lora_name!r}, but this engine runs without "
                           "LoRA; start it with enable_lora=True (--enable-lora)")
