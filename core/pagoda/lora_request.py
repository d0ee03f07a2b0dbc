"""Which LoRA adapter a request runs with: :class:`LoRARequest` (vLLM's name and fields).

``LoRARequest("sql", 1, "/adapters/sql")`` names an adapter folder as PEFT saves it
(``adapter_config.json`` + ``adapter_model.safetensors``) and gives it a positive integer id
that the engine keys it by; one id stands for one adapter while the engine runs. See docs/lora.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.errors import RequestError


@dataclass(frozen=True)
class LoRARequest:
    """An adapter a request runs with: its name, its id (an integer >= 1) and its folder."""

    lora_name: str
    lora_int_id: int
    lora_path: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.lora_name, str) or not self.lora_name:
            raise RequestError(f"a LoRA adapter needs a non-empty name, got {self.lora_name!r}")
        if isinstance(self.lora_int_id, bool) or not isinstance(self.lora_int_id, int) or self.lora_int_id < 1:
            raise RequestError(f"LoRA adapter {self.lora_name!r}: its id must be an integer >= 1, "
                               f"got {self.lora_int_id!r}")
        if not isinstance(self.lora_path, str) or not self.lora_path:
            raise RequestError(f"LoRA adapter {self.lora_name!r}: give the folder of its adapter_config.json "
                               "and adapter_model.safetensors as lora_path")

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def path(self) -> str:
        return self.lora_path
