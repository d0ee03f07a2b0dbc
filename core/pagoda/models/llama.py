"""The Llama-family decoder, parameterised by :class:`DecoderOptions`.

One implementation serves Llama (1/2/3, SmolLM2), Mistral, Qwen2 and Qwen3: pre-norm
residual blocks of GQA attention (fused QKV, rotary, optional q/k RMSNorm, optional biases)
and a SiLU-gated MLP (fused gate/up). Tokens of all sequences are packed: no batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable

import torch
from torch import nn

from pagoda.interfaces.model import BuildContext, CausalLM, ForwardContext, IntermediateTensors
from pagoda.layers.activation import gated_activation
from pagoda.layers.attention import Attention
from pagoda.layers.embedding import LMHead, VocabEmbedding
from pagoda.layers.linear import Linear, MergedLinear, QKVLinear
from pagoda.layers.norm import RMSNorm
from pagoda.layers.pipeline import on_stage, stage_layers
from pagoda.layers.rotary import RotaryEmbedding, rope_config_from_hf
from pagoda.models import spec
from pagoda.models.weights import Experts, Stacked, WeightMapper


@dataclass(frozen=True)
class DecoderOptions:
    """Where the family members differ (everything else is read from the HF config)."""

    qkv_bias: bool = False  # biases on q/k/v projections
    o_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False  # biases on gate/up/down
    qk_norm: bool = False  # per-head RMSNorm of q and k before rotary (Qwen3)


class DecoderAttention(nn.Module):
    """Self-attention: qkv_proj -> (q/k norm) -> rotary -> paged attention -> o_proj."""

    def __init__(
        self, cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions, rotary: RotaryEmbedding
    ) -> None:
        super().__init__()
        d, heads, kv_heads = spec.head_dim(cfg), int(cfg.num_attention_heads), spec.num_kv_heads(cfg)
        self.head_dim = d
        qm, dt, tp = ctx.quant_method, ctx.dtype, ctx.tp
        self.qkv_proj = QKVLinear(cfg.hidden_size, d, heads, kv_heads, bias=opts.qkv_bias, quant_method=qm, dtype=dt,
                                  tp=tp)
        self.o_proj = Linear(heads * d, cfg.hidden_size, bias=opts.o_bias, quant_method=qm, dtype=dt, tp=tp,
                             parallel="row")
        if opts.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps, ctx.ops, dt)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps, ctx.ops, dt)
        self.qk_norm = opts.qk_norm
        self.rotary_emb = rotary  # one module (one cos/sin cache) shared by all layers
        local_heads, local_kv_heads = self.qkv_proj.q_size // d, self.qkv_proj.kv_size // d  # this rank's
        backend = spec.layer_attention(ctx.attention, cfg, layer_idx)  # its sliding window, if the model mixes them
        self.attn = Attention(layer_idx, local_heads, local_kv_heads, d, backend)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        q, k, v = self.qkv_proj.split(self.qkv_proj(x))  # [T, heads*d], [T, kv*d], [T, kv*d]
        if self.qk_norm:
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape[0], -1)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape[0], -1)
        q, k = self.rotary_emb(positions, q, k)
        return self.o_proj(self.attn(q, k, v, fwd))  # [T, hidden]

    @property
    def input_quantizer(self) -> Any:
        """What the norm before this block should quantize its output with (None: plain tensors)."""
        return self.qkv_proj.input_quantizer

    def defer_all_reduce(self) -> bool:
        """Return o_proj's partial sums from now on, if it can (see ``LinearBase.defer_all_reduce``)."""
        return self.o_proj.defer_all_reduce()


class GatedMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)) with gate and up fused (``intermediate_size``: the config's,
    unless given)."""

    def __init__(self, cfg: Any, ctx: BuildContext, opts: DecoderOptions, intermediate_size: int | None = None) -> None:
        super().__init__()
        h, qm, dt, tp = cfg.hidden_size, ctx.quant_method, ctx.dtype, ctx.tp
        inter = intermediate_size or cfg.intermediate_size
        shards = {"gate": inter, "up": inter}
        self.gate_up_proj = MergedLinear(h, shards, bias=opts.mlp_bias, quant_method=qm, dtype=dt, tp=tp)
        self.down_proj = Linear(inter, h, bias=opts.mlp_bias, quant_method=qm, dtype=dt, tp=tp, parallel="row")
        self.act_fn = gated_activation(getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", "silu"),
                                       ctx.ops)

    @property
    def input_quantizer(self) -> Any:
        """What the norm before this MLP should quantize its output with (None: plain tensors)."""
        return self.gate_up_proj.input_quantizer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_up_proj(x), self.down_proj.input_quantizer))  # [T, hidden]

    def defer_all_reduce(self) -> bool:
        """Return down_proj's partial sums from now on, if it can (see ``LinearBase.defer_all_reduce``)."""
        return self.down_proj.defer_all_reduce()


MlpFactory = Callable[[Any, int, BuildContext, DecoderOptions], nn.Module]  # (cfg, layer_idx, ctx, opts) -> mlp
# (cfg, layer_idx, ctx, opts, rotary) -> the attention block: forward(positions, x, fwd) -> [T, hidden], with
# input_quantizer (for the norm before it) and defer_all_reduce() (see DecoderAttention)
AttentionFactory = Callable[[Any, int, BuildContext, DecoderOptions, RotaryEmbedding], nn.Module]


def dense_mlp(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions) -> nn.Module:
    """The default MLP of every layer: :class:`GatedMLP` of ``intermediate_size``."""
    return GatedMLP(cfg, ctx, opts)


class DecoderLayer(nn.Module):
    """Pre-norm block; the residual stream is carried separately so the adds fuse into the norms.

    ``mlp`` maps ``[T, hidden] -> [T, hidden]``; its ``input_quantizer`` (if any) quantizes the norm before it.
    ``build_attention`` makes the attention block (default :class:`DecoderAttention`; DeepSeek's latent attention).
    Under tensor parallelism the all-reduce of o_proj moves into ``post_attention_layernorm`` (one
    kernel for sum, residual add and norm where the platform has it); :class:`DecoderModel` does the
    same for the MLP's sum and the next norm. The MLP's output is then this rank's partial sums.
    """

    def __init__(
        self, cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions, rotary: RotaryEmbedding,
        mlp: nn.Module, build_attention: AttentionFactory = DecoderAttention,
    ) -> None:
        super().__init__()
        self.self_attn = build_attention(cfg, layer_idx, ctx, opts, rotary)
        self.mlp = mlp
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ctx.ops, ctx.dtype)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ctx.ops, ctx.dtype)
        self.post_attention_layernorm.take_all_reduce_of(self.self_attn, ctx.tp)

    def forward(
        self, positions: torch.Tensor, x: torch.Tensor, residual: torch.Tensor | None, fwd: ForwardContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        qkv_quant, gate_up_quant = self.self_attn.input_quantizer, getattr(self.mlp, "input_quantizer", None)
        if residual is None:
            residual, x = x, self.input_layernorm(x, quant=qkv_quant)
        else:
            x, residual = self.input_layernorm(x, residual, qkv_quant)
        x = self.self_attn(positions, x, fwd)
        x, residual = self.post_attention_layernorm(x, residual, gate_up_quant)
        return self.mlp(x), residual


class DecoderModel(nn.Module):
    """Embedding, the decoder layers and the final norm (HF's ``model.`` prefix); on a pipeline stage
    (``ctx.pp``) only that stage's part of them (:mod:`pagoda.layers.pipeline`)."""

    def __init__(self, cfg: Any, ctx: BuildContext, opts: DecoderOptions, build_mlp: MlpFactory = dense_mlp,
                 rotary: RotaryEmbedding | None = None, build_attention: AttentionFactory = DecoderAttention) -> None:
        super().__init__()
        pp = self.pp = ctx.pp
        self.embed_tokens = on_stage(pp.is_first, lambda: VocabEmbedding(cfg.vocab_size, cfg.hidden_size, ctx.dtype,
                                                                          ctx.tp, ctx.ops))
        n, d = spec.num_kv_cache_layers(cfg), spec.head_dim(cfg)
        self.rotary_emb = rotary = rotary or RotaryEmbedding(rope_config_from_hf(cfg, d), d, ctx.ops)
        self.layers = stage_layers(n, pp, lambda i: DecoderLayer(cfg, i, ctx, opts, rotary, build_mlp(cfg, i, ctx, opts),
                                                                 build_attention))
        self.own_layers = [self.layers[i] for i in pp.layers(n)]
        self.norm = on_stage(pp.is_last, lambda: RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ctx.ops, ctx.dtype))
        # each MLP's sum moves into the norm after it (the stage's last MLP sums itself where the next stage has it)
        next_norms = [*(layer.input_layernorm for layer in self.own_layers[1:]), self.norm if pp.is_last else None]
        for layer, next_norm in zip(self.own_layers, next_norms):
            if next_norm is not None:
                next_norm.take_all_reduce_of(layer.mlp, ctx.tp)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The token embeddings the first layer takes: ``[T]`` -> ``[T, hidden]``."""
        return self.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor | IntermediateTensors:
        """``inputs_embeds`` (``[T, hidden]``, e.g. with image rows merged) replaces ``embed(input_ids)``. A
        pipeline stage after the first starts from ``fwd.intermediate``; one before the last returns its own."""
        if self.pp.is_first:
            x, residual = (self.embed(input_ids) if inputs_embeds is None else inputs_embeds), None  # [T, hidden]
        else:
            x, residual = fwd.intermediate.hidden, fwd.intermediate.residual  # [T, hidden] each
        positions = self.rotary_emb.rope_positions(positions, fwd.metadata)  # LongRoPE: maybe its long rows
        for layer in self.own_layers:
            x, residual = layer(positions, x, residual, fwd)
        if not self.pp.is_last:
            return IntermediateTensors(x, residual)
        x, _ = self.norm(x, residual)
        return x


class LlamaForCausalLM(CausalLM):
    """Llama-family causal LM; subclasses pick :class:`DecoderOptions` from the config."""

    stacked: ClassVar[Stacked] = {
        "q_proj": ("qkv_proj", "q"),
        "k_proj": ("qkv_proj", "k"),
        "v_proj": ("qkv_proj", "v"),
        "gate_proj": ("gate_up_proj", "gate"),
        "up_proj": ("gate_up_proj", "up"),
    }
    skip_weights: ClassVar[tuple[str, ...]] = ("rotary_emb.inv_freq", "rotary_emb.cos_cached", "rotary_emb.sin_cached")
    experts: ClassVar[Experts] = {}  # MoE families: expert projection name -> gate/up/down (see weights.py)
    renames: ClassVar[dict[str, str]] = {}  # checkpoint name fragment -> Pagoda's

    supports_pipeline_parallel: ClassVar[bool] = True

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        self.tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.model = DecoderModel(hf_config, ctx, self.decoder_options(hf_config), self.build_mlp,
                                  self.build_rotary(hf_config, ctx), self.build_attention)
        tied = self.model.embed_tokens if self.tied and ctx.pp.is_first else None  # else its own copy (last stage)
        self.lm_head = on_stage(ctx.pp.is_last, lambda: LMHead(hf_config.vocab_size, hf_config.hidden_size,
                                                               ctx.dtype, tied=tied, tp=ctx.tp, ops=ctx.ops))

    @classmethod
    def decoder_options(cls, hf_config: Any) -> DecoderOptions:
        bias = bool(getattr(hf_config, "attention_bias", False))
        return DecoderOptions(qkv_bias=bias, o_bias=bias, mlp_bias=bool(getattr(hf_config, "mlp_bias", False)))

    @classmethod
    def build_rotary(cls, hf_config: Any, ctx: BuildContext) -> RotaryEmbedding | None:
        """The rotary embedding all layers share; None: the one the config describes (M-RoPE families override)."""
        return None

    @staticmethod
    def build_mlp(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions) -> nn.Module:
        """The MLP of layer ``layer_idx`` (MoE families return their sparse block here)."""
        return dense_mlp(cfg, layer_idx, ctx, opts)

    @staticmethod
    def build_attention(cfg: Any, layer_idx: int, ctx: BuildContext, opts: DecoderOptions,
                        rotary: RotaryEmbedding) -> nn.Module:
        """The attention block of layer ``layer_idx`` (DeepSeek returns its latent attention here)."""
        return DecoderAttention(cfg, layer_idx, ctx, opts, rotary)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        return self.model(input_ids, positions, fwd)  # [num_tokens, hidden]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)  # [n, vocab] float32

    def weight_mapper(self) -> WeightMapper:
        renames = self.renames
        if self.tied and isinstance(self.lm_head, LMHead) and not self.lm_head.tied:  # the last of several stages
            renames = {**renames, "model.embed_tokens.weight": "lm_head.weight"}
        ignore = ("lm_head.weight",) if self.tied else ()  # tied: the embedding's tensor fills it
        return WeightMapper(self, self.stacked, skip=self.skip_weights, ignore=ignore, experts=self.experts,
                            renames=renames)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return self.weight_mapper().load(weights)

    def checkpoint_names(self, param_name: str) -> list[str]:
        """HF tensor names that fill ``param_name`` (for error messages)."""
        return self.weight_mapper().checkpoint_names(param_name)

    def lora_targets(self) -> dict[str, tuple[str, str | None]]:
        """Each HF projection (q/k/v_proj, gate/up_proj, o/down_proj) -> its fused layer and shard."""
        return self.weight_mapper().lora_targets()


class MistralForCausalLM(LlamaForCausalLM):
    """Mistral: Llama with an optional sliding window (carried by the AttentionSpec)."""
