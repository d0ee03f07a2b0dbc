"""Mixtral: the Mistral decoder with a sparse MoE block (top-k of ``num_local_experts``) in every layer."""

from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from pagoda.interfaces.model import BuildContext
from pagoda.models.llama import DecoderOptions, MistralForCausalLM
from pagoda.models.sparse_moe import MoeShape, SparseMoeBlock
from pagoda.models.weights import Experts


class MixtralForCausalLM(MistralForCausalLM):
    """Mixtral 8x7B / 8x22B; checkpoints name the block ``block_sparse_moe`` and its experts' w1/w3/w2."""

    experts: ClassVar[Experts] = {"w1": "gate", "w3": "up", "w2": "down"}
    renames: ClassVar[dict[str, str]] = {".block_sparse_moe.": ".mlp."}

    @staticmethod
    def build_mlp(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions) -> nn.Module:
        shape = MoeShape(int(cfg.num_local_experts), int(cfg.num_experts_per_tok), int(cfg.intermediate_size),
                         renormalize=True)
        return SparseMoeBlock(cfg.hidden_size, shape, ctx)

