"""The sparse MoE block shared by Mixtral and Qwen3-MoE: a router, then the fused experts.

The router is a small replicated linear layer kept unquantized (its logits decide the routing);
the experts are a :class:`pagoda.layers.moe.FusedMoE` (dense weights only for now).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext
from pagoda.layers.linear import Linear
from pagoda.layers.moe import FusedMoE, select_experts
from pagoda.quantization.unquantized import UnquantizedMethod


def require_dense_experts(ctx: BuildContext, quant_config: Any = None) -> None:
    """ModelLoadError unless the model's linear layers are unquantized: the fused experts hold dense weights only.
    ``quant_config`` (config.json's ``quantization_config``) names a quantized checkpoint's scheme in the error."""
    if isinstance(ctx.quant_method, UnquantizedMethod):
        return
    method = type(ctx.quant_method).__name__
    if not quant_config:
        raise ModelLoadError(f"MoE experts support only unquantized weights for now, not {method}; load the model "
                             "without --quantization.")
    cfg = quant_config if isinstance(quant_config, dict) else quant_config.to_dict()
    scheme = ", ".join(f"{key} {cfg[key]!r}" for key in ("quant_method", "fmt", "weight_block_size", "format")
                       if cfg.get(key) is not None)
    raise ModelLoadError(
        f"This checkpoint's MoE experts are quantized ({scheme}; read by {method}), and Pagoda's MoE layer holds "
        "unquantized expert weights only for now. Use a bfloat16 checkpoint of the model (dequantize the experts "
        "first)."
    )


@dataclass(frozen=True)
class MoeShape:
    """What an MoE config says about its sparse layers."""

    num_experts: int
    top_k: int
    intermediate_size: int  # per expert
    renormalize: bool  # rescale the top-k routing weights to sum to 1


class SparseMoeBlock(nn.Module):
    """``[T, hidden] -> [T, hidden]``: route each token to ``top_k`` experts and mix their outputs."""

    def __init__(self, hidden_size: int, shape: MoeShape, ctx: BuildContext) -> None:
        super().__init__()
        require_dense_experts(ctx)
        self.shape = shape
        self.gate = Linear(hidden_size, shape.num_experts, bias=False, quant_method=UnquantizedMethod(),
                           dtype=ctx.dtype)  # the router, replicated on every rank
        self.experts = FusedMoE(shape.num_experts, hidden_size, shape.intermediate_size, ops=ctx.ops,
                                dtype=ctx.dtype, tp=ctx.tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = select_experts(self.gate(x), self.shape.top_k, self.shape.renormalize)  # [T, k]
        return self.experts(x, topk_weights, topk_ids)  # [T, hidden]
