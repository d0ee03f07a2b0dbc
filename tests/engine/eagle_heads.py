"""Tiny EAGLE heads for tests: written in the published EAGLE-1 checkpoint format, a plain-torch
reference of the head (independent of Pagoda's), and a few hundred steps of training on the
target's own hidden states (a head that predicts well)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch.nn import functional as F

from tiny_models import VOCAB

HEAD_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6,
                   rope_theta=10000.0, hidden_act="silu")


def random_head_weights(seed: int = 0, hidden: int = 64, inter: int = 128, heads: int = 4, kv_heads: int = 2,
                        head_dim: int = 16, bias: bool = True) -> dict[str, torch.Tensor]:
    """EAGLE-1 head tensors (names as in the published checkpoints), random."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape: int, std: float = 0.08) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    w = {"fc.weight": r(hidden, 2 * hidden)}
    if bias:
        w["fc.bias"] = r(hidden)
    w.update({
        "layers.0.self_attn.q_proj.weight": r(heads * head_dim, hidden),
        "layers.0.self_attn.k_proj.weight": r(kv_heads * head_dim, hidden),
        "layers.0.self_attn.v_proj.weight": r(kv_heads * head_dim, hidden),
        "layers.0.self_attn.o_proj.weight": r(hidden, heads * head_dim),
        "layers.0.mlp.gate_proj.weight": r(inter, hidden),
        "layers.0.mlp.up_proj.weight": r(inter, hidden),
        "layers.0.mlp.down_proj.weight": r(hidden, inter),
        "layers.0.post_attention_layernorm.weight": 1 + r(hidden, std=0.1),
    })
    return w


def save_head(path, weights: dict[str, torch.Tensor], bin_format: bool = False, **config) -> str:
    """config.json (LlamaConfig-like, as EAGLE publishes it) and the weights."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": "fc.bias" in weights,
           **HEAD_CONFIG, **config}
    (path / "config.json").write_text(json.dumps(cfg))
    tensors = {k: v.detach().float().contiguous() for k, v in weights.items()}
    if bin_format:
        torch.save(tensors, path / "pytorch_model.bin")
    else:
        save_file(tensors, str(path / "model.safetensors"))
    return str(path)


# -- the reference head: plain torch, HF conventions, whole sequences --------------------------
def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def reference_head(w: dict[str, torch.Tensor], embeds: torch.Tensor, hidden: torch.Tensor,
                   config: dict = HEAD_CONFIG) -> torch.Tensor:
    """EAGLE-1 head over whole sequences: ``embeds[b, p]`` = embedding of token p + 1, ``hidden[b, p]``
    = the target's final hidden state at p; returns the predicted hidden states [B, L, H]."""
    b, length, h = hidden.shape
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    x = F.linear(torch.cat((embeds, hidden), dim=-1), w["fc.weight"], w.get("fc.bias"))  # no norm on layer 0's input
    q = F.linear(x, w["layers.0.self_attn.q_proj.weight"]).view(b, length, heads, d).transpose(1, 2)
    k = F.linear(x, w["layers.0.self_attn.k_proj.weight"]).view(b, length, kv_heads, d).transpose(1, 2)
    v = F.linear(x, w["layers.0.self_attn.v_proj.weight"]).view(b, length, kv_heads, d).transpose(1, 2)
    inv_freq = 1.0 / config["rope_theta"] ** (torch.arange(0, d, 2, dtype=x.dtype) / d)
    angles = torch.arange(length, dtype=x.dtype)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
    k, v = k.repeat_interleave(heads // kv_heads, 1), v.repeat_interleave(heads // kv_heads, 1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
    attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, length, h)
    x = x + F.linear(attn, w["layers.0.self_attn.o_proj.weight"])
    y = _rms(x, w["layers.0.post_attention_layernorm.weight"], config["rms_norm_eps"])
    gate, up = F.linear(y, w["layers.0.mlp.gate_proj.weight"]), F.linear(y, w["layers.0.mlp.up_proj.weight"])
    return x + F.linear(F.silu(gate) * up, w["layers.0.mlp.down_proj.weight"])  # no final norm


# -- a head that predicts well ------------------------------------------------------------------
def target_features(hf_model, sequences: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(token ids [B, L], the target's final hidden states [B, L, H]: after its final norm)."""
    ids = torch.tensor(sequences)
    with torch.no_grad():
        return ids, hf_model.model(input_ids=ids).last_hidden_state


def train_head(hf_model, sequences: list[list[int]], steps: int = 300, seed: int = 0) -> dict[str, torch.Tensor]:
    """EAGLE's objective on the target's own sequences: regress the next hidden state (smooth L1) and
    predict the token after it through the target's LM head (cross-entropy, weight 0.1)."""
    torch.manual_seed(seed)  # the input noise
    ids, feats = target_features(hf_model, sequences)
    embed = hf_model.model.embed_tokens.weight.detach()
    lm_head = hf_model.lm_head.weight.detach()
    w = {k: v.clone().requires_grad_(True) for k, v in random_head_weights(seed).items()}
    optim = torch.optim.Adam(w.values(), lr=3e-3)
    embeds = embed[ids[:, 1:]]  # [B, L - 1, H]: token p + 1 for position p
    inputs = feats[:, :-1]
    targets = feats[:, 1:]  # the hidden state at p + 1
    next_tokens = ids[:, 2:]  # the token after p + 1
    for _ in range(steps):
        noisy = inputs + torch.randn_like(inputs) * 0.05  # EAGLE: noise on the input features
        out = reference_head(w, embeds, noisy)
        value = F.smooth_l1_loss(out, targets)
        logits = out[:, :-1] @ lm_head.T
        token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), next_tokens.reshape(-1))
        loss = value + 0.1 * token
        optim.zero_grad()
        loss.backward()
        optim.step()
    return {k: v.detach() for k, v in w.items()}
