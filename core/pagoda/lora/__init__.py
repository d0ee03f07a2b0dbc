"""LoRA adapters over one base model, many in one batch (docs/lora.md).

:class:`LoRARequest` names a request's adapter; :class:`~pagoda.lora.step.LoRAStep` is the step feature
that runs them, :mod:`pagoda.lora.admission` keeps the scheduler within the adapter slots, and
:mod:`pagoda.lora.engine` checks adapters before their requests are queued.
"""

from pagoda.lora_request import LoRARequest

__all__ = ["LoRARequest"]
