"""DeepSeek's MoE layer: grouped top-k routing over the routed experts, plus always-on shared experts.

The router (``mlp.gate``: ``weight`` and, in V3, ``e_score_correction_bias``) stays unquantized and float32,
as transformers keeps it, and is replicated on every rank; the routed experts are one
:class:`pagoda.layers.moe.FusedMoE` (the fused-MoE Triton kernel on GPUs, its torch reference on CPU), with
``routed_scaling_factor`` folded into the routing weights; the shared experts are one gated MLP of
``n_shared_experts * moe_intermediate_size`` features, through the model's quantization method.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.interfaces.model import BuildContext
from pagoda.layers.moe import FusedMoE
from pagoda.layers.moe_routing import GroupedRouting, grouped_topk
from pagoda.models.llama import DecoderOptions, GatedMLP
from pagoda.models.sparse_moe import require_dense_experts


def is_moe_layer(cfg: Any, layer_idx: int) -> bool:
    """MoE from layer ``first_k_dense_replace`` on, every ``moe_layer_freq``-th layer (DeepSeek's rule)."""
    freq = int(getattr(cfg, "moe_layer_freq", None) or 1)
    first = int(getattr(cfg, "first_k_dense_replace", None) or 0)
    return bool(getattr(cfg, "n_routed_experts", None)) and layer_idx >= first and layer_idx % freq == 0


class Router(nn.Module):
    """``[T, hidden] -> [T, num_experts]`` float32 logits; holds V3's ``e_score_correction_bias``."""

    def __init__(self, hidden_size: int, num_experts: int, biased: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size, dtype=torch.float32), requires_grad=False)
        bias = torch.zeros(num_experts, dtype=torch.float32)
        self.e_score_correction_bias = nn.Parameter(bias, requires_grad=False) if biased else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.float(), self.weight)


class DeepseekMoE(nn.Module):
    """``[T, hidden] -> [T, hidden]``: the routed experts' weighted sum plus the shared experts' output."""

    def __init__(self, cfg: Any, ctx: BuildContext, opts: DecoderOptions) -> None:
        super().__init__()
        require_dense_experts(ctx, getattr(cfg, "quantization_config", None))
        self.routing = GroupedRouting.from_hf(cfg)
        inter = int(cfg.moe_intermediate_size)
        self.gate = Router(cfg.hidden_size, self.routing.num_experts, self.routing.biased)
        self.experts = FusedMoE(self.routing.num_experts, cfg.hidden_size, inter, ops=ctx.ops, dtype=ctx.dtype,
                                tp=ctx.tp)
        shared = int(getattr(cfg, "n_shared_experts", None) or 0)
        self.shared_experts = GatedMLP(cfg, ctx, opts, shared * inter) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = grouped_topk(self.gate(x), self.routing, self.gate.e_score_correction_bias)  # [T, top_k]
        routed = self.experts(x, weights, ids)  # [T, hidden], summed over tensor-parallel ranks
        return routed if self.shared_experts is None else routed + self.shared_experts(x)
