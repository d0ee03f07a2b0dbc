"""Tiny random HF models and a one-step runner for Pagoda models (shared by model/loader tests).

``save_tiny(kind, folder)`` builds a transformers model with randomised weights (biases and
norm weights included, so loading them matters), saves it and returns the HF model.
``run_prefill(model, ctx, seqs)`` runs Pagoda's model on a packed batch of whole prompts
through the paged KV cache and returns the logits of every token.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.interfaces import AttentionMetadata, BuildContext, ForwardContext
from pagoda.interfaces.ops import CustomOps
from pagoda.loader import ModelSource, load_hf_config, load_model
from pagoda.models import model_class
from pagoda.models.spec import attention_spec, num_kv_cache_layers
from pagoda.platforms.cpu import CpuPlatform
from pagoda.quantization.unquantized import UnquantizedMethod

BLOCK_SIZE = 4
COMMON = dict(vocab_size=96, hidden_size=48, intermediate_size=80, num_hidden_layers=2, rms_norm_eps=1e-5,
              max_position_embeddings=128, num_attention_heads=4, num_key_value_heads=2)
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32, "rope_theta": 10000.0}


MOE = {  # 6 experts, 2 per token; Qwen3-MoE: layer 1 dense (mlp_only_layers), experts narrower than the dense MLP
    "mixtral": dict(num_local_experts=6, num_experts_per_tok=2),
    "qwen3_moe": dict(num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, decoder_sparse_step=1,
                      mlp_only_layers=[1], norm_topk_prob=True),
}


DEEPSEEK = dict(num_hidden_layers=3, num_key_value_heads=4, first_k_dense_replace=1, n_routed_experts=8,
                num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                v_head_dim=12, head_dim=8)  # heads attend over a 24-value latent; layer 0 dense, layers 1-2 MoE
DEEPSEEK_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "mscale": 1.0, "mscale_all_dim": 0.8,
                 "original_max_position_embeddings": 32, "beta_fast": 32, "beta_slow": 1}

FAMILY = {  # what a family's tiny config sets beyond COMMON
    # 3 layers: local, global, local; window 5 < the 14-token prompt; query_pre_attn_scalar != head_dim
    "gemma3": dict(num_hidden_layers=3, sliding_window=5, query_pre_attn_scalar=24, tie_word_embeddings=True,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    "phi3": dict(hidden_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2),  # head_dim = hidden / heads
    # V2: q without LoRA, softmax greedy routing, 2 shared experts, YaRN (mscale != mscale_all_dim)
    "deepseek_v2": dict(DEEPSEEK, q_lora_rank=None, n_shared_experts=2, routed_scaling_factor=1.5,
                        rope_parameters=DEEPSEEK_YARN),
    # V3: q LoRA, sigmoid scores over 4 groups (2 kept) with a random e_score_correction_bias, renormalised
    "deepseek_v3": dict(DEEPSEEK, q_lora_rank=24, n_group=4, topk_group=2, n_shared_experts=1,
                        routed_scaling_factor=2.5, num_mtp_layers=0),
}


def longrope(original: int, partial: float = 1.0, head_dim: int = 16) -> dict:
    """Phi-3 LongRoPE parameters (distinct short and long factors) for ``original_max_position_embeddings``."""
    half = int(head_dim * partial) // 2
    return {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": partial,
            "short_factor": [1.0 + 0.1 * i for i in range(half)], "long_factor": [2.0 + 1.5 * i for i in range(half)],
            "original_max_position_embeddings": original}


def hf_config(kind: str, **overrides):
    """A tiny config of ``kind`` (llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gemma3, phi3, deepseek_v2,
    deepseek_v3) with ``overrides`` applied."""
    import transformers as tf

    cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config,
           "mixtral": tf.MixtralConfig, "qwen3_moe": tf.Qwen3MoeConfig, "gemma3": tf.Gemma3TextConfig,
           "phi3": tf.Phi3Config, "deepseek_v2": tf.DeepseekV2Config, "deepseek_v3": tf.DeepseekV3Config}[kind]
    kwargs = {**COMMON, "head_dim": 16, "tie_word_embeddings": False, **MOE.get(kind, {}), **FAMILY.get(kind, {}),
              **overrides}
    return cls(**kwargs)


def hf_model(config):
    """The transformers model for ``config`` with every parameter randomised (seeded)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    return randomise(model)


@torch.no_grad()
def randomise(model):
    """Every parameter of ``model`` random (norm weights around 1, biases and weights around 0), and DeepSeek-V3's
    routing bias (a buffer); in eval mode."""
    for name, p in model.named_parameters():
        if "norm" in name:
            p.copy_(1.0 + 0.2 * torch.randn_like(p))
        elif name.endswith("bias"):
            p.copy_(0.2 * torch.randn_like(p))
        else:
            p.copy_(0.15 * torch.randn_like(p))
    for name, b in model.named_buffers():
        if name.endswith("e_score_correction_bias"):
            b.copy_(0.3 * torch.randn_like(b))
    return model.eval()


def save_tiny(kind: str, folder: Path, **overrides):
    """Save a randomised tiny ``kind`` model to ``folder``; returns the HF model."""
    model = hf_model(hf_config(kind, **overrides))
    model.save_pretrained(folder)
    return model


def build_ctx(config, dtype: torch.dtype = torch.float32) -> BuildContext:
    spec = attention_spec(config, BLOCK_SIZE, dtype)
    return BuildContext(dtype, quant_method=UnquantizedMethod(), ops=CustomOps(),
                        attention=TorchAttentionBackend(spec, CpuPlatform()))


def load_pagoda(folder: Path, load_format: str = "auto", gguf_file: str | None = None):
    """(model, ctx) for the checkpoint in ``folder``, through Pagoda's loader."""
    source = ModelSource(Path(folder), gguf_file, "tiny")
    config = load_hf_config(source)
    ctx = build_ctx(config)
    model = load_model(source, config, ctx, model_class(config.architectures[0]), load_format, "cpu", progress=False)
    return model, ctx


def prefill_metadata(lens: list[int]) -> tuple[AttentionMetadata, int]:
    """Metadata for whole prompts of ``lens`` tokens, each in its own run of blocks."""
    blocks_per_seq = [-(-n // BLOCK_SIZE) for n in lens]
    width = max(blocks_per_seq)
    tables = torch.zeros(len(lens), width, dtype=torch.int32)
    slots, first = [], 0
    for i, (n, nb) in enumerate(zip(lens, blocks_per_seq)):
        tables[i, :nb] = torch.arange(first, first + nb, dtype=torch.int32)
        slots.append(first * BLOCK_SIZE + torch.arange(n))
        first += nb
    starts = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    meta = AttentionMetadata(slot_mapping=torch.cat(slots), block_tables=tables, query_start_loc=starts,
                             seq_lens=torch.tensor(lens, dtype=torch.int32), max_query_len=max(lens),
                             max_seq_len=max(lens))
    return meta, first


@torch.no_grad()
def run_prefill(model, ctx: BuildContext, seqs: list[list[int]]) -> torch.Tensor:
    """Logits ``[total_tokens, vocab]`` of Pagoda's model over the packed prompts ``seqs``."""
    meta, num_blocks = prefill_metadata([len(s) for s in seqs])
    shape = ctx.attention.kv_cache_shape(num_blocks)
    caches = [torch.zeros(shape, dtype=ctx.dtype) for _ in range(num_kv_cache_layers(model.config))]
    ids = torch.tensor([t for s in seqs for t in s])
    positions = torch.cat([torch.arange(len(s)) for s in seqs])
    hidden = model(ids, positions, ForwardContext(meta, caches))  # [T, hidden]
    return model.compute_logits(hidden)


@torch.no_grad()
def hf_logits(model, ids: list[int]) -> torch.Tensor:
    """HF's logits ``[len(ids), vocab]`` for one sequence."""
    return model(torch.tensor([ids])).logits[0].float()
