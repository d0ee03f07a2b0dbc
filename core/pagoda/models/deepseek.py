"""DeepSeek-V2 and V3 (V2-Lite, V2.5, V3, R1): multi-head latent attention and DeepSeek's MoE on the Llama
decoder (pre-norm blocks, fused residual norms, the pipeline-stage and tensor-parallel mechanics).

Attention (:class:`MLAttention`): the query comes from ``q_proj`` or, with ``q_lora_rank``, from
``q_b_proj(norm(q_a_proj(x)))``; each head's query is a no-rope part (``qk_nope_head_dim``) and a rope part
(``qk_rope_head_dim``). ``kv_a_proj_with_mqa`` compresses the token into a latent (``kv_lora_rank``, then
normalised) and one rope key shared by all heads. Only the latent and the rotated rope key are cached; the
backend attends in the absorbed form (:mod:`pagoda.layers.mla`). Rotary runs on the rope dims only,
interleaved pairs (V2; V3 unless ``rope_interleave`` is false), with YaRN as configured; the softmax scale is
``qk_head_dim ** -0.5`` times ``mscale(factor, mscale_all_dim) ** 2`` under YaRN
(:func:`pagoda.models.spec.mla_softmax_scale`).

MLP: dense for the first ``first_k_dense_replace`` layers, then :class:`DeepseekMoE`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Iterable

import torch
from torch import nn

from pagoda.interfaces.model import BuildContext, ForwardContext
from pagoda.layers.linear import Linear
from pagoda.layers.mla import LatentAttention
from pagoda.layers.norm import RMSNorm
from pagoda.layers.rotary import RotaryEmbedding, rope_config_from_hf
from pagoda.models.deepseek_moe import DeepseekMoE, is_moe_layer
from pagoda.models.llama import DecoderOptions, GatedMLP, LlamaForCausalLM
from pagoda.models.weights import Experts, Stacked

LORA_NORM_EPS = 1e-6  # q_a_layernorm and kv_a_layernorm use RMSNorm's default eps, not rms_norm_eps


class MLAttention(nn.Module):
    """DeepSeek's attention block: ``[T, hidden] -> [T, hidden]`` over a latent KV cache."""

    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions,
                 rotary: RotaryEmbedding) -> None:
        super().__init__()
        heads, h = int(cfg.num_attention_heads), int(cfg.hidden_size)
        self.nope, self.rope, self.v = int(cfg.qk_nope_head_dim), int(cfg.qk_rope_head_dim), int(cfg.v_head_dim)
        self.kv_lora_rank, q_lora_rank = int(cfg.kv_lora_rank), getattr(cfg, "q_lora_rank", None)
        qm, dt, tp, bias = ctx.quant_method, ctx.dtype, ctx.tp, bool(getattr(cfg, "attention_bias", False))
        q_out = heads * (self.nope + self.rope)
        if q_lora_rank:  # replicated down-projection, norm, column-parallel up-projection (this rank's heads)
            self.q_a_proj = Linear(h, int(q_lora_rank), bias=bias, quant_method=qm, dtype=dt)
            self.q_a_layernorm = RMSNorm(int(q_lora_rank), LORA_NORM_EPS, ctx.ops, dt)
            self.q_b_proj = Linear(int(q_lora_rank), q_out, bias=False, quant_method=qm, dtype=dt, tp=tp,
                                   parallel="column")
        else:
            self.q_proj = Linear(h, q_out, bias=False, quant_method=qm, dtype=dt, tp=tp, parallel="column")
        self.q_lora = bool(q_lora_rank)
        self.kv_a_proj_with_mqa = Linear(h, self.kv_lora_rank + self.rope, bias=bias, quant_method=qm, dtype=dt)
        self.kv_a_layernorm = RMSNorm(self.kv_lora_rank, LORA_NORM_EPS, ctx.ops, dt)
        self.kv_b_proj = Linear(self.kv_lora_rank, heads * (self.nope + self.v), bias=False, quant_method=qm,
                                dtype=dt, tp=tp, parallel="column")
        self.o_proj = Linear(heads * self.v, h, bias=bias, quant_method=qm, dtype=dt, tp=tp, parallel="row")
        self.heads = heads // tp.size  # this rank's
        self.rotary_emb = rotary  # shared by all layers
        self.attn = LatentAttention(layer_idx, self.heads, self.nope, self.v, self.kv_b_proj, ctx.attention, dt)

    input_quantizer = None  # two projections read the norm's output: it stays a plain tensor

    def forward(self, positions: torch.Tensor, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        t = x.shape[0]
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))) if self.q_lora else self.q_proj(x)
        q_nope, q_pe = q.view(t, self.heads, self.nope + self.rope).split([self.nope, self.rope], dim=-1)
        c, k_pe = self.kv_a_proj_with_mqa(x).split([self.kv_lora_rank, self.rope], dim=-1)  # [T, L], [T, R]
        q_pe, k_pe = q_pe.reshape(t, self.heads * self.rope), k_pe.contiguous()  # copies: rotated in place
        self.rotary_emb(positions, q_pe, k_pe)
        latent = torch.cat((self.kv_a_layernorm(c.contiguous()), k_pe), dim=-1)  # [T, L + R]: the cached row
        out = self.attn(q_nope, q_pe.view(t, self.heads, self.rope), latent, fwd)  # [T, heads * v]
        return self.o_proj(out)  # [T, hidden]

    def defer_all_reduce(self) -> bool:
        """Return o_proj's partial sums from now on, if it can (see ``LinearBase.defer_all_reduce``)."""
        return self.o_proj.defer_all_reduce()


class DeepseekV2ForCausalLM(LlamaForCausalLM):
    """DeepSeek-V2 / V2-Lite / V2.5; checkpoints name the experts ``mlp.experts.<e>.{gate,up,down}_proj``."""

    stacked: ClassVar[Stacked] = {"gate_proj": ("gate_up_proj", "gate"), "up_proj": ("gate_up_proj", "up")}
    experts: ClassVar[Experts] = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}

    @classmethod
    def decoder_options(cls, hf_config: Any) -> DecoderOptions:
        return DecoderOptions(mlp_bias=False)

    @classmethod
    def build_rotary(cls, hf_config: Any, ctx: BuildContext) -> RotaryEmbedding:
        """Rotary over the ``qk_rope_head_dim`` rope dims; interleaved pairs unless ``rope_interleave`` is false."""
        d = int(hf_config.qk_rope_head_dim)
        rope = rope_config_from_hf(hf_config, d)
        interleaved = getattr(hf_config, "rope_interleave", True) is not False
        return RotaryEmbedding(dataclasses.replace(rope, is_neox=not interleaved), d, ctx.ops)

    @staticmethod
    def build_attention(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions,
                        rotary: RotaryEmbedding) -> nn.Module:
        return MLAttention(cfg, layer_idx, ctx, opts, rotary)

    @staticmethod
    def build_mlp(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions) -> nn.Module:
        return DeepseekMoE(cfg, ctx, opts) if is_moe_layer(cfg, layer_idx) else GatedMLP(cfg, ctx, opts)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """The decoder's tensors; V3's multi-token-prediction layers (``model.layers.<n>`` past
        ``num_hidden_layers``) are not run and skipped."""
        n = int(self.config.num_hidden_layers)
        extra = int(getattr(self.config, "num_nextn_predict_layers", None) or 0)
        mapper = self.weight_mapper()
        mapper.skip += tuple(f"model.layers.{i}." for i in range(n, n + extra))
        return mapper.load(weights)


class DeepseekV3ForCausalLM(DeepseekV2ForCausalLM):
    """DeepSeek-V3 / R1: V2's layers with sigmoid grouped routing (``noaux_tc``) and a score bias per expert."""
