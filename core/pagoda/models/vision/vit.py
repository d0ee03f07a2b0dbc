"""CLIP and SigLIP vision towers: a ViT of pre-norm encoder layers over fixed-size square images.

CLIP (LLaVA) prepends a class token and norms the embeddings before the layers (``pre_layrnorm``, HF's
spelling); SigLIP (Gemma 3) has no class token and norms the last layer's output (``post_layernorm``).
A tower builds only the layers its model reads: LLaVA takes the hidden states of a middle layer
(``vision_feature_layer``), so the layers after it are neither built nor loaded.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pagoda.interfaces.model import BuildContext
from pagoda.layers.layer_norm import LayerNorm
from pagoda.layers.linear import Linear, QKVLinear
from pagoda.models.vision.common import PatchEmbedding, activation, patches, segment_attention


class VitAttention(nn.Module):
    """Bidirectional multi-head attention over each image's tokens: q/k/v (fused) -> attention -> out_proj."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        h, heads = cfg.hidden_size, cfg.num_attention_heads
        self.heads, self.head_dim = heads, h // heads
        self.scale = self.head_dim**-0.5
        self.qkv_proj = QKVLinear(h, self.head_dim, heads, heads, bias=True, quant_method=ctx.quant_method,
                                  dtype=ctx.dtype)
        self.out_proj = Linear(h, h, bias=True, quant_method=ctx.quant_method, dtype=ctx.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: [images, tokens, hidden] -> the same shape."""
        b, n, _ = x.shape
        q, k, v = (t.reshape(b * n, self.heads, self.head_dim) for t in self.qkv_proj.split(self.qkv_proj(x)))
        out = segment_attention(q, k, v, list(range(0, b * n + 1, n)), self.scale)  # [b * n, heads, d]
        return self.out_proj(out.reshape(b, n, -1))


class VitMLP(nn.Module):
    """fc2(act(fc1(x)))."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        h, inter, qm, dt = cfg.hidden_size, cfg.intermediate_size, ctx.quant_method, ctx.dtype
        self.fc1 = Linear(h, inter, bias=True, quant_method=qm, dtype=dt)
        self.fc2 = Linear(inter, h, bias=True, quant_method=qm, dtype=dt)
        self.act = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class VitLayer(nn.Module):
    """``x + attn(norm1(x))``, then ``+ mlp(norm2(x))``."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        eps = cfg.layer_norm_eps
        self.layer_norm1 = LayerNorm(cfg.hidden_size, eps, ctx.dtype)
        self.self_attn = VitAttention(cfg, ctx)
        self.layer_norm2 = LayerNorm(cfg.hidden_size, eps, ctx.dtype)
        self.mlp = VitMLP(cfg, ctx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x))
        return x + self.mlp(self.layer_norm2(x))


class VitEncoder(nn.Module):
    def __init__(self, cfg: Any, ctx: BuildContext, num_layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(VitLayer(cfg, ctx) for _ in range(num_layers))


class VitEmbeddings(nn.Module):
    """Patch embedding (+ class token) + learned absolute positions."""

    def __init__(self, cfg: Any, ctx: BuildContext, class_token: bool, patch_bias: bool) -> None:
        super().__init__()
        h, self.patch = cfg.hidden_size, cfg.patch_size
        self.patch_embedding = PatchEmbedding(cfg.num_channels * self.patch**2, h, patch_bias, ctx.dtype)
        num_positions = (cfg.image_size // self.patch) ** 2 + int(class_token)
        self.position_embedding = nn.Embedding(num_positions, h, dtype=ctx.dtype)
        self.position_embedding.weight.requires_grad_(False)
        self.class_embedding = nn.Parameter(torch.empty(h, dtype=ctx.dtype), requires_grad=False) if class_token else None
        self.image_size = cfg.image_size

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """``[B, C, S, S]`` -> ``[B, tokens, hidden]``."""
        if pixel_values.shape[-2:] != (self.image_size, self.image_size):
            raise ValueError(f"the vision tower takes {self.image_size}x{self.image_size} images, got "
                             f"{tuple(pixel_values.shape[-2:])}; preprocess them with the model's image processor")
        x = self.patch_embedding(patches(pixel_values, self.patch))  # [B, patches, hidden]
        if self.class_embedding is not None:
            x = torch.cat([self.class_embedding.expand(x.shape[0], 1, -1), x], dim=1)
        return x + self.position_embedding.weight


class VisionTransformer(nn.Module):
    """A CLIP (``class_token``, pre-norm) or SigLIP (no class token, post-norm) tower of ``num_layers`` layers."""

    def __init__(self, cfg: Any, ctx: BuildContext, num_layers: int, clip: bool) -> None:
        super().__init__()
        self.embeddings = VitEmbeddings(cfg, ctx, class_token=clip, patch_bias=not clip)
        self.pre_layrnorm = LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, ctx.dtype) if clip else None
        self.encoder = VitEncoder(cfg, ctx, num_layers)
        self.post_layernorm = None if clip else LayerNorm(cfg.hidden_size, cfg.layer_norm_eps, ctx.dtype)

    def forward(self, pixel_values: torch.Tensor, keep: tuple[int, ...] = ()) -> list[torch.Tensor]:
        """Hidden states ``[B, tokens, hidden]`` after each layer in ``keep`` (0: the embeddings), or after the
        last layer (and the post-norm, if any) when ``keep`` is empty."""
        x = self.embeddings(pixel_values)
        if self.pre_layrnorm is not None:
            x = self.pre_layrnorm(x)
        kept = [x] if 0 in keep else []
        for i, layer in enumerate(self.encoder.layers, start=1):
            x = layer(x)
            if i in keep:
                kept.append(x)
        if keep:
            return kept
        return [self.post_layernorm(x) if self.post_layernorm is not None else x]
