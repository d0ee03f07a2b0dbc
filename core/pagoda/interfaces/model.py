"""The model protocol: a causal LM written against Pagoda's layers, registered by HF architecture."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import torch
from torch import nn

from pagoda.distributed.parallel import SINGLE, TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
    from pagoda.interfaces.quantization import QuantizationMethod
    from pagoda.layers.ops import CustomOps


@dataclass
class BuildContext:
    """What a model needs at construction: dtype, the linear-layer method, kernels, attention,
    and the tensor-parallel rank its layers shard for (one rank of one by default)."""

    dtype: torch.dtype
    quant_method: "QuantizationMethod"
    ops: "CustomOps"
    attention: "AttentionBackend"
    tp: TensorParallel = SINGLE


@dataclass
class ForwardContext:
    """Per-step inputs shared by all layers: attention layout and one KV cache tensor per layer."""

    metadata: "AttentionMetadata"
    kv_caches: list[torch.Tensor] = field(default_factory=list)


class CausalLM(nn.Module, ABC):
    """A decoder-only LM over a packed batch of tokens (no padding, no batch axis).

    ``__init__(hf_config, ctx)`` builds the layers from :mod:`pagoda.layers` (each linear layer
    delegates to ``ctx.quant_method``, each attention layer to ``ctx.attention``).
    """

    @abstractmethod
    def __init__(self, hf_config: "PretrainedConfig", ctx: BuildContext) -> None:
        super().__init__()

    @abstractmethod
    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens] int64
        positions: torch.Tensor,  # [num_tokens] int64
        fwd: ForwardContext,
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        """Run the decoder; returns final hidden states (after the last norm)."""

    @abstractmethod
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[n, hidden_size]`` -> float32 logits ``[n, vocab_size]``."""

    @abstractmethod
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy checkpoint tensors (HF names) into parameters; return the parameter names filled."""
