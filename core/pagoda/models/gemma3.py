"""Gemma 3 (text): the Llama-shaped decoder with Gemma's differences.

- embeddings scaled by ``sqrt(hidden_size)`` (rounded to the weight dtype, as transformers does);
- four norms per layer (before and after attention, before and after the MLP), all of Gemma's
  ``(1 + weight)`` kind (:class:`pagoda.layers.norm.GemmaRMSNorm`), also on q and k per head;
- local (sliding-window) and global layers interleaved as ``layer_types`` says (every 6th global by
  default), each kind with its own rotary base (``rope_parameters`` per layer type, or the older
  ``rope_theta`` / ``rope_local_base_freq``); the layers get views of the attention backend with
  their own window (:func:`pagoda.models.spec.layer_attention`);
- scores scaled by ``query_pre_attn_scalar ** -0.5``; optional ``attn_logit_softcapping`` (the
  AttentionSpec carries it) and ``final_logit_softcapping`` (applied to the logits here);
- a GELU-tanh gated MLP; the LM head tied to the embeddings.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable

import torch
from torch import nn

from pagoda.interfaces.model import BuildContext, CausalLM, ForwardContext
from pagoda.layers.embedding import LMHead, VocabEmbedding
from pagoda.layers.norm import GemmaRMSNorm
from pagoda.layers.rotary import FULL, SLIDING, RotaryEmbedding, rope_config_from_hf
from pagoda.models import spec
from pagoda.models.llama import DecoderAttention, DecoderOptions, GatedMLP, LlamaForCausalLM
from pagoda.models.weights import WeightMapper


class Gemma3Attention(DecoderAttention):
    """The decoder's attention with Gemma's q/k norms."""

    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext, rotary: RotaryEmbedding) -> None:
        bias = bool(getattr(cfg, "attention_bias", False))
        super().__init__(cfg, layer_idx, ctx, DecoderOptions(qkv_bias=bias, o_bias=bias, qk_norm=True), rotary)
        self.q_norm = GemmaRMSNorm(self.head_dim, cfg.rms_norm_eps, ctx.dtype)
        self.k_norm = GemmaRMSNorm(self.head_dim, cfg.rms_norm_eps, ctx.dtype)


class Gemma3DecoderLayer(nn.Module):
    """``x + post_attn_norm(attn(input_norm(x)))``, then ``+ post_ffw_norm(mlp(pre_ffw_norm(x)))``."""

    def __init__(self, cfg: Any, layer_idx: int, ctx: BuildContext, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = Gemma3Attention(cfg, layer_idx, ctx, rotary)
        self.mlp = GatedMLP(cfg, ctx, DecoderOptions())
        h, eps, dt = cfg.hidden_size, cfg.rms_norm_eps, ctx.dtype
        self.input_layernorm = GemmaRMSNorm(h, eps, dt)
        self.post_attention_layernorm = GemmaRMSNorm(h, eps, dt)
        self.pre_feedforward_layernorm = GemmaRMSNorm(h, eps, dt)
        self.post_feedforward_layernorm = GemmaRMSNorm(h, eps, dt)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        h = self.input_layernorm(x, self.self_attn.qkv_proj.input_quantizer)  # x: the residual stream [T, hidden]
        x = x + self.post_attention_layernorm(self.self_attn(positions, h, fwd))
        h = self.pre_feedforward_layernorm(x, self.mlp.input_quantizer)
        return x + self.post_feedforward_layernorm(self.mlp(h))


class Gemma3Model(nn.Module):
    """Scaled embedding, the decoder layers (local and global) and the final norm (HF's ``model.``)."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.embed_tokens = VocabEmbedding(cfg.vocab_size, cfg.hidden_size, ctx.dtype, ctx.tp, ctx.ops)
        # sqrt(hidden) rounded to the weight dtype, as transformers scales (e.g. 25.25 for 640 in bfloat16)
        self.embed_scale = float(torch.tensor(float(cfg.hidden_size) ** 0.5).to(ctx.dtype))
        d = spec.head_dim(cfg)
        self.rotary_global = RotaryEmbedding(rope_config_from_hf(cfg, d, FULL), d, ctx.ops)
        local = rope_config_from_hf(cfg, d, SLIDING)
        self.rotary_local = self.rotary_global if local == self.rotary_global.rope else RotaryEmbedding(local, d, ctx.ops)
        sliding = spec.layer_is_sliding(cfg)
        self.layers = nn.ModuleList(
            Gemma3DecoderLayer(cfg, i, ctx, self.rotary_local if sliding[i] else self.rotary_global)
            for i in range(spec.num_kv_cache_layers(cfg))
        )
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ctx.dtype)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The scaled token embeddings the first layer takes: ``[T]`` -> ``[T, hidden]``."""
        return self.embed_tokens(input_ids) * self.embed_scale

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        """``inputs_embeds`` (``[T, hidden]``, e.g. with image rows merged) replaces ``embed(input_ids)``."""
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds  # [T, hidden]
        for layer in self.layers:
            x = layer(positions, x, fwd)
        return self.norm(x)


class Gemma3ForCausalLM(CausalLM):
    """Gemma 3 text models (270M, 1B; and the language model of the multimodal sizes)."""

    stacked = LlamaForCausalLM.stacked
    skip_weights: ClassVar[tuple[str, ...]] = LlamaForCausalLM.skip_weights
    renames: ClassVar[dict[str, str]] = {}  # checkpoint name fragment -> Pagoda's

    def __init__(self, hf_config: Any, ctx: BuildContext) -> None:
        super().__init__(hf_config, ctx)
        self.config = hf_config
        self.tied = bool(getattr(hf_config, "tie_word_embeddings", True))
        self.model = Gemma3Model(hf_config, ctx)
        tied = self.model.embed_tokens if self.tied else None
        self.lm_head = LMHead(hf_config.vocab_size, hf_config.hidden_size, ctx.dtype, tied=tied, tp=ctx.tp,
                              ops=ctx.ops)
        self.final_soft_cap = getattr(hf_config, "final_logit_softcapping", None) or None

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, fwd: ForwardContext) -> torch.Tensor:
        return self.model(input_ids, positions, fwd)  # [num_tokens, hidden]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden)  # [n, vocab] float32
        if self.final_soft_cap:
            logits = torch.tanh(logits / self.final_soft_cap) * self.final_soft_cap
        return logits

    def weight_mapper(self) -> WeightMapper:
        ignore = ("lm_head.weight",) if self.tied else ()
        return WeightMapper(self, self.stacked, skip=self.skip_weights, ignore=ignore, renames=self.renames)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return self.weight_mapper().load(weights)

    def checkpoint_names(self, param_name: str) -> list[str]:
        """HF tensor names that fill ``param_name`` (for error messages)."""
        return self.weight_mapper().checkpoint_names(param_name)

    def lora_targets(self) -> dict[str, tuple[str, str | None]]:
        """Each HF projection (q/k/v_proj, gate/up_proj, o/down_proj) -> its fused layer and shard."""
        return self.weight_mapper().lora_targets()

