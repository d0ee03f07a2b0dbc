"""The model protocols: a causal LM, or a pooling (encoder) model, written against Pagoda's layers and
registered by HF architecture."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Iterable

import torch
from torch import nn

from pagoda.interfaces.parallel import SINGLE, WHOLE, PipelineParallel, TensorParallel

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
    from pagoda.interfaces.multimodal import MultimodalEmbeddings
    from pagoda.interfaces.quantization import QuantizationMethod
    from pagoda.interfaces.ops import CustomOps


@dataclass
class BuildContext:
    """What a model needs at construction: dtype, the linear-layer method, kernels, attention,
    the tensor-parallel rank its layers shard for (one rank of one by default) and the pipeline
    stage whose layers it builds (all of them by default)."""

    dtype: torch.dtype
    quant_method: "QuantizationMethod"
    ops: "CustomOps"
    attention: "AttentionBackend"
    tp: TensorParallel = SINGLE
    pp: PipelineParallel = WHOLE


@dataclass
class IntermediateTensors:
    """What a pipeline stage other than the last returns and the next one starts from: the hidden states
    and the residual stream after its last layer (``[num_tokens, hidden_size]`` each)."""

    hidden: torch.Tensor
    residual: torch.Tensor


@dataclass
class ForwardContext:
    """Per-step inputs shared by all layers: attention layout and one KV cache tensor per layer."""

    metadata: "AttentionMetadata"
    kv_caches: list[torch.Tensor] = field(default_factory=list)
    token_type_ids: torch.Tensor | None = None  # [num_tokens] int64 segment ids of text pairs (BERT); None: all 0
    multimodal: "MultimodalEmbeddings | None" = None  # the step's image rows to merge (multimodal models)
    intermediate: IntermediateTensors | None = None  # pipeline stages after the first: what the stage before sent


class CausalLM(nn.Module, ABC):
    """A decoder-only LM over a packed batch of tokens (no padding, no batch axis).

    ``__init__(hf_config, ctx)`` builds the layers from :mod:`pagoda.layers` (each linear layer
    delegates to ``ctx.quant_method``, each attention layer to ``ctx.attention``).

    A family with ``supports_pipeline_parallel`` builds only ``ctx.pp``'s decoder layers (the others as
    :class:`pagoda.layers.pipeline.MissingLayer`, whose checkpoint tensors are skipped), the embedding only on
    the first stage and the final norm and LM head only on the last; ``forward`` on a stage before the last
    returns :class:`IntermediateTensors`, and a stage after the first starts from ``fwd.intermediate``.
    """

    supports_pipeline_parallel: ClassVar[bool] = False

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
        """Run the decoder; returns final hidden states (after the last norm), or on a pipeline stage before
        the last its :class:`IntermediateTensors`."""

    @abstractmethod
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[n, hidden_size]`` -> float32 logits ``[n, vocab_size]``."""

    @abstractmethod
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy checkpoint tensors (HF names) into parameters; return the parameter names filled."""

    def lora_targets(self) -> dict[str, tuple[str, str | None]]:
        """Where LoRA adapters attach (docs/lora.md): each module name an adapter may target, as PEFT
        saves it from the HF model (``model.layers.0.self_attn.q_proj``), -> ``(path of the Pagoda linear
        layer it lands in, its shard id)``; the shard id is None when the module is the whole layer (an
        adapter trained on a fused projection spans all its shards, split by ``full_output_sizes``).

        Targets must be :class:`pagoda.layers.linear.LinearBase` layers (LoRA adds to their output through
        ``attach_delta``). The default maps every submodule with a ``quant_method`` (a linear layer) to
        itself, unsharded; a family that fuses HF projections (q/k/v into ``qkv_proj``) maps each HF name to
        its shard, as the Llama family does from its checkpoint name mapping."""
        return {name: (name, None) for name, module in self.named_modules() if hasattr(module, "quant_method")}


class PoolingModel(nn.Module, ABC):
    """A model whose outputs are pooled hidden states, not tokens (encoder-only models such as BERT).

    Runs only under ``runner="pooling"`` (docs/pooling.md): each prompt is computed whole in one
    step and the runner pools ``forward``'s hidden states per sequence (CLS, mean, last token).
    ``causal_attention = False`` makes the engine build a bidirectional AttentionSpec.
    A model with a task head (a classifier) applies it in :meth:`pooled_head`.
    """

    causal_attention: ClassVar[bool] = False
    default_pooling_type: ClassVar[str] = "CLS"  # when the checkpoint carries no sentence-transformers config
    is_classifier: ClassVar[bool] = False  # pooled_head returns ``config.num_labels`` label logits

    @abstractmethod
    def __init__(self, hf_config: "PretrainedConfig", ctx: BuildContext) -> None:
        super().__init__()

    @abstractmethod
    def forward(
        self,
        input_ids: torch.Tensor,  # [num_tokens] int64
        positions: torch.Tensor,  # [num_tokens] int64, from 0 within each sequence
        fwd: ForwardContext,
    ) -> torch.Tensor:  # [num_tokens, hidden_size]
        """Run the encoder; returns the last layer's hidden states."""

    def pooled_head(self, pooled: torch.Tensor) -> torch.Tensor:
        """``[n, hidden_size]`` pooled vectors -> the model's outputs (identity for embedding models)."""
        return pooled

    @abstractmethod
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Copy checkpoint tensors (HF names) into parameters; return the parameter names filled."""
