"""Pagoda: an LLM inference and serving engine built from plugins."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pagoda.entrypoints.llm import LLM
    from pagoda.lora_request import LoRARequest
    from pagoda.pooling_params import PoolingParams
    from pagoda.sampling_params import BeamSearchParams, GuidedDecodingParams, SamplingParams

_LAZY = {"LLM": "pagoda.entrypoints.llm", "SamplingParams": "pagoda.sampling_params",
         "GuidedDecodingParams": "pagoda.sampling_params", "BeamSearchParams": "pagoda.sampling_params",
         "PoolingParams": "pagoda.pooling_params", "LoRARequest": "pagoda.lora_request"}


def __getattr__(name: str) -> Any:  # keep `import pagoda` light: the CLI imports torch only when needed
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pagoda' has no attribute {name!r}")


__all__ = ["BeamSearchParams", "GuidedDecodingParams", "LLM", "LoRARequest", "PoolingParams", "SamplingParams",
           "__version__"]
