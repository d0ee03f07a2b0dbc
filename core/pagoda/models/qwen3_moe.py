"""Qwen3-MoE: the Qwen3 decoder (q/k norm) with sparse MoE blocks on the layers the config names."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from pagoda.interfaces.model import BuildContext
from pagoda.models.llama import DecoderOptions, GatedMLP
from pagoda.models.qwen3 import Qwen3ForCausalLM
from pagoda.models.sparse_moe import MoeShape, SparseMoeBlock
from pagoda.models.weights import Experts


def is_sparse_layer(cfg: Any, layer_idx: int) -> bool:
    """MoE on every ``decoder_sparse_step``-th layer, except those in ``mlp_only_layers`` (dense)."""
    step = int(getattr(cfg, "decoder_sparse_step", 1) or 1)
    dense_only = set(getattr(cfg, "mlp_only_layers", None) or [])
    return int(cfg.num_experts) > 0 and layer_idx not in dense_only and (layer_idx + 1) % step == 0


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    """Qwen3-30B-A3B, Qwen3-235B-A22B; experts' gate_proj/up_proj/down_proj under ``mlp.experts.<e>``."""

    experts: ClassVar[Experts] = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}

    @staticmethod
    def build_mlp(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions) -> nn.Module:
        if not is_sparse_layer(cfg, layer_idx):
            return GatedMLP(cfg, ctx, opts)
        shape = MoeShape(int(cfg.num_experts), int(cfg.num_experts_per_tok), int(cfg.moe_intermediate_size),
                         renormalize=bool(getattr(cfg, "norm_topk_prob", False)))
        return SparseMoeBlock(cfg.hidden_size, shape, ctx)

