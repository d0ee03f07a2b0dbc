"""QuantizationMethod: how a linear layer stores its weights and computes ``x @ W.T``.

A method whose matmul takes quantized activations (W8A8) can also hand the layer an
:class:`InputQuantizer`: the producers of that layer's input (RMSNorm, the gated activation) then
emit the quantized activations directly (one fused kernel instead of a producer kernel plus a
quantization kernel), and the layer receives a :class:`QuantizedInput` instead of a tensor.

LoRA adapters (docs/lora.md) attach to any method's layers: the adapter's product is added to
``apply``'s output, computed from the layer's plain input. A layer with an adapter takes plain
tensors (its ``input_quantizer`` is dropped), so ``apply`` must accept them, as it must anyway, and
its output must be the layer's output features in order (all of this rank's shards, bias included).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from pagoda.interfaces.base import Capability
from pagoda.interfaces.platform import Platform

if TYPE_CHECKING:
    from pagoda.interfaces.ops import CustomOps


class QuantizedInput(NamedTuple):
    """A linear layer's input, already quantized the way its method computes with."""

    data: torch.Tensor  # e.g. fp8 [num_tokens, in_features]
    scale: torch.Tensor  # e.g. float32 [num_tokens, 1]
    dtype: torch.dtype  # the model dtype: the layer's output dtype


class InputQuantizer(ABC):
    """Quantizes a linear layer's input, alone or fused into the kernel that produces it.

    The fused entry points default to the producer's own op followed by :meth:`quantize`;
    a method overrides them with single kernels. Each must equal that composition up to the
    rounding of the quantized format.
    """

    @abstractmethod
    def quantize(self, x: torch.Tensor) -> QuantizedInput:
        """``x`` [num_tokens, in_features] in the model dtype."""

    def rms_norm(self, ops: "CustomOps", x: torch.Tensor, weight: torch.Tensor, eps: float) -> QuantizedInput:
        return self.quantize(ops.rms_norm(x, weight, eps))

    def fused_add_rms_norm(
        self, ops: "CustomOps", x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[QuantizedInput, torch.Tensor]:
        """``(quantize(rms_norm(x + residual)), x + residual)``."""
        normed, residual = ops.fused_add_rms_norm(x, residual, weight, eps)
        return self.quantize(normed), residual

    def silu_and_mul(self, ops: "CustomOps", x: torch.Tensor) -> QuantizedInput:
        return self.quantize(ops.silu_and_mul(x))


class QuantizationMethod(Capability, ABC):
    """Owns the parameters of every linear layer of a model.

    ``create_weights`` registers parameters on the layer (their names are the checkpoint's, e.g.
    ``weight``, ``weight_scale``, ``qweight``); the loader copies checkpoint tensors into them;
    ``process_weights_after_loading`` may repack them; ``apply`` computes the layer's output.
    One instance serves every linear layer of the model, so per-layer state lives on the layer.

    The layer contract (``pagoda.layers.linear.LinearBase``):

    - Which layers: the projections of attention and MLP blocks (``qkv_proj``, ``o_proj``,
      ``gate_up_proj``, ``down_proj`` and their kin). The token embedding, the LM head, norms, MoE
      experts and routers are never given to the method: they stay dense in the model dtype.
    - What the layer holds when ``create_weights`` runs: ``layer.in_features``,
      ``layer.out_features`` and ``layer.output_sizes`` (one entry per fused shard, e.g. q, k, v;
      ``layer.shard_names`` names them on fused layers), ``layer.parallel`` (``"column"``,
      ``"row"`` or ``None``) and ``layer.tp`` (``rank``, ``size``). The layer's ``bias`` is its own,
      created after, and passed to ``apply``.
    - Tensor parallelism: every size above is this rank's. A column-parallel layer keeps a slice
      of each shard's output features, a row-parallel one a slice of its input features; the
      loader narrows each checkpoint tensor to the rank's slice before copying it, along the axes
      the parameter declares: ``param.output_dim`` (default 0; ``None``: copied whole, shared by
      the shards), ``param.pack_factor`` (output features per stored element, e.g. 8 int4 in an
      int32), ``param.input_dim`` / ``param.input_pack_factor`` (row-parallel layers; e.g. per-group
      scales), ``param.shard_indexed`` (one entry per shard along axis 0, e.g. one scale per q/k/v).
    - Loading: each checkpoint tensor ``<module>.<name>`` is copied into the layer's parameter
      ``<name>`` (shapes checked); a name the method did not create is an error that names the
      parameters it did create.
    - ``process_weights_after_loading`` runs once, after every tensor is in. To change a
      parameter's shape, dtype or layout, replace it: ``layer.weight = nn.Parameter(new,
      requires_grad=False)`` (or delete it and keep a buffer); keep what ``apply`` reads.
    """

    def __init__(self, quant_config: dict[str, Any] | None = None) -> None:
        self.quant_config = quant_config or {}

    @classmethod
    def check(cls, platform: Platform) -> str | None:
        """``None`` if this method runs on ``platform``, else the reason."""
        return None

    @abstractmethod
    def create_weights(
        self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype
    ) -> None:
        """Register the layer's parameters, sized for this rank (before loading; values are
        overwritten). ``dtype`` is the model's; quantized parameters choose their own."""

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        """Convert loaded parameters to the layout ``apply`` uses (replace a parameter to change
        its shape or dtype)."""

    def bind_ops(self, ops: "CustomOps") -> None:
        """Called with the platform's custom ops before the model is built (a method that computes
        with them keeps them); by default nothing."""

    def input_quantizer(self, layer: nn.Module) -> InputQuantizer | None:
        """After loading: how ``layer`` wants its input quantized, if its producers may do it
        (``apply`` then also accepts a :class:`QuantizedInput`); ``None``: plain tensors only."""
        return None

    @abstractmethod
    def apply(self, layer: nn.Module, x: torch.Tensor | QuantizedInput, bias: torch.Tensor | None) -> torch.Tensor:
        """``x``: ``[num_tokens, in_features]`` -> ``[num_tokens, out_features]`` in the model dtype,
        plus ``bias`` when given (a row-parallel layer passes ``None`` and adds its bias after the
        all-reduce of the ranks' partial outputs)."""
