"""The sparse MoE block shared by Mixtral and Qwen3-MoE: a router, then the fused experts.

The router is a small replicated linear layer kept unquantized (its logits decide the routing);
the experts are a :class:`pagoda.layers.moe.FusedMoE` (dense weights only for now).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext
from pagoda.layers.linear import Linear
from pagoda.layers.moe import FusedMoE, select_experts
from pagoda.quantization.unquantized import UnquantizedMethod


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
        if not isinstance(ctx.quant_method, UnquantizedMethod):
            raise ModelLoadError(
                f"MoE experts support only unquantized weights for now, not {type(ctx.quant_method).__name__}; "
                "load the model without --quantization."
            )
        self.shape = shape
        self.gate = Linear(hidden_size, shape.num_experts, bias=False, quant_method=UnquantizedMethod(),
                           dtype=ctx.dtype)  # the router, replicated on every rank
        self.experts = FusedMoE(shape.num_experts, hidden_size, shape.intermediate_size, ops=ctx.ops,
                                dtype=ctx.dtype, tp=ctx.tp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        topk_weights, topk_ids = select_experts(self.gate(x), self.shape.top_k, self.shape.renormalize)  # [T, k]
        return self.experts(x, topk_weights, topk_ids)  # [T, hidden]
