"""Qwen2.5-VL's vision transformer: images at their own resolution, windowed attention, 2-D rotary.

An image arrives as ``grid_thw = (t, h, w)`` patches already flattened by the image processor
(``[t*h*w, C * temporal_patch * patch * patch]``, in blocks of ``merge x merge`` neighbouring patches).
Most layers attend within windows of ``window_size`` pixels; the layers in ``fullatt_block_indexes``
attend over the whole image. Tokens are reordered once so each window's tokens are contiguous, rotated
by their (row, column) on the patch grid, and put back in image order after the merger, which
concatenates each ``merge x merge`` block and projects it to the decoder's width: one token per block.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.interfaces.model import BuildContext
from pagoda.layers.activation import gated_activation
from pagoda.layers.linear import Linear, MergedLinear, QKVLinear
from pagoda.layers.norm import RMSNorm
from pagoda.models.vision.common import PatchEmbedding, segment_attention

Grid = tuple[int, int, int]  # (t, h, w) in patches


class Qwen2_5_VisionAttention(nn.Module):
    """Fused qkv (biased) -> 2-D rotary -> attention within segments -> proj."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        h, self.heads = cfg.hidden_size, cfg.num_heads
        self.head_dim = h // self.heads
        self.qkv = QKVLinear(h, self.head_dim, self.heads, self.heads, bias=True, quant_method=ctx.quant_method,
                             dtype=ctx.dtype)
        self.proj = Linear(h, h, bias=True, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.ops = ctx.ops

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, bounds: list[int]) -> torch.Tensor:
        """``x``: [tokens, hidden]; ``cos_sin``: [tokens, head_dim] rotary table, one row per token."""
        q, k, v = self.qkv.split(self.qkv(x))
        q, k = q.contiguous(), k.contiguous()
        rows = torch.arange(x.shape[0], device=x.device)
        self.ops.rotary_embedding(rows, q, k, self.head_dim, cos_sin, True)
        shape = (x.shape[0], self.heads, self.head_dim)
        out = segment_attention(q.view(shape), k.view(shape), v.reshape(shape), bounds, self.head_dim**-0.5)
        return self.proj(out.reshape(x.shape[0], -1))


class Qwen2_5_VisionMLP(nn.Module):
    """down_proj(act(gate_proj(x)) * up_proj(x)), all biased."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        h, inter, qm, dt = cfg.hidden_size, cfg.intermediate_size, ctx.quant_method, ctx.dtype
        self.gate_up_proj = MergedLinear(h, {"gate": inter, "up": inter}, bias=True, quant_method=qm, dtype=dt)
        self.down_proj = Linear(inter, h, bias=True, quant_method=qm, dtype=dt)
        self.act = gated_activation(cfg.hidden_act, ctx.ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.gate_up_proj(x)))


class Qwen2_5_VisionBlock(nn.Module):
    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.norm1 = RMSNorm(cfg.hidden_size, 1e-6, ctx.ops, ctx.dtype)
        self.norm2 = RMSNorm(cfg.hidden_size, 1e-6, ctx.ops, ctx.dtype)
        self.attn = Qwen2_5_VisionAttention(cfg, ctx)
        self.mlp = Qwen2_5_VisionMLP(cfg, ctx)

    def forward(self, x: torch.Tensor, cos_sin: torch.Tensor, bounds: list[int]) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), cos_sin, bounds)
        return x + self.mlp(self.norm2(x))


class Qwen2_5_PatchMerger(nn.Module):
    """RMSNorm, then each ``merge x merge`` block of tokens concatenated -> fc1 -> GELU -> fc2."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        width = cfg.hidden_size * cfg.spatial_merge_size**2
        self.ln_q = RMSNorm(cfg.hidden_size, 1e-6, ctx.ops, ctx.dtype)
        self.fc1 = Linear(width, width, bias=True, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.fc2 = Linear(width, cfg.out_hidden_size, bias=True, quant_method=ctx.quant_method, dtype=ctx.dtype)
        self.width = width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(self.ln_q(x).view(-1, self.width))))


class Qwen2_5_VisionTransformer(nn.Module):
    """Patch embedding, the blocks (windowed or full) and the merger (HF's ``visual.``)."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        super().__init__()
        self.merge, self.patch, self.window = cfg.spatial_merge_size, cfg.patch_size, cfg.window_size
        patch_dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size**2
        self.patch_embed = PatchEmbedding(patch_dim, cfg.hidden_size, False, ctx.dtype)
        self.blocks = nn.ModuleList(Qwen2_5_VisionBlock(cfg, ctx) for _ in range(cfg.depth))
        self.full_attention = set(cfg.fullatt_block_indexes)
        self.merger = Qwen2_5_PatchMerger(cfg, ctx)
        head_dim = cfg.hidden_size // cfg.num_heads
        theta = float((getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0))
        quarter = torch.arange(0, head_dim // 2, 2, dtype=torch.float32) / (head_dim // 2)
        self.register_buffer("inv_freq", 1.0 / theta**quarter, persistent=False)  # [head_dim / 4]

    def forward(self, flat_patches: torch.Tensor, grids: Sequence[Grid]) -> torch.Tensor:
        """``[sum(t*h*w), patch_dim]`` -> ``[sum(t*h*w) / merge^2, out_hidden_size]`` in image order."""
        order, window_bounds, image_bounds = self.window_order(grids)
        unit = self.merge**2
        x = self.patch_embed(flat_patches)  # [N, hidden]
        x = x.view(-1, unit, x.shape[-1])[order].flatten(0, 1)  # windows' tokens contiguous
        cos_sin = self.rotary_table(grids).view(-1, unit, 2 * self.inv_freq.numel() * 2)[order].flatten(0, 1)
        for i, block in enumerate(self.blocks):
            x = block(x, cos_sin, image_bounds if i in self.full_attention else window_bounds)
        merged = self.merger(x)  # [N / unit, out_hidden], window order
        return merged[torch.argsort(order)]

    def rotary_table(self, grids: Sequence[Grid]) -> torch.Tensor:
        """``[N, head_dim]``: per patch, cos then sin of its (row, column) angles (merge-block order)."""
        rows = []
        for t, h, w in grids:
            r, c = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            block = (h // self.merge, self.merge, w // self.merge, self.merge)
            pos = torch.stack([x.reshape(block).transpose(1, 2).flatten() for x in (r, c)], dim=-1)  # [h*w, 2]
            rows.append(pos.repeat(t, 1))
        pos = torch.cat(rows).to(self.inv_freq.device)
        angles = (pos[..., None].float() * self.inv_freq).flatten(1)  # [N, head_dim / 2]: row angles, then column
        return torch.cat([angles.cos(), angles.sin()], dim=-1)

    def window_order(self, grids: Sequence[Grid]) -> tuple[torch.Tensor, list[int], list[int]]:
        """The merge-block permutation putting each window's blocks together, the token bounds of the windows
        (in that order) and of the images (each frame of ``t`` is one image)."""
        side = self.window // self.merge // self.patch  # window side in merged blocks
        unit, order, window_bounds, image_bounds, first = self.merge**2, [], [0], [0], 0
        for t, h, w in grids:
            bh, bw = h // self.merge, w // self.merge
            index = torch.arange(t * bh * bw).view(t, bh, bw)
            for frame in range(t):
                for r0 in range(0, bh, side):
                    for c0 in range(0, bw, side):
                        window = index[frame, r0 : r0 + side, c0 : c0 + side].flatten()
                        order.append(window + first)
                        window_bounds.append(window_bounds[-1] + window.numel() * unit)
                image_bounds.append(image_bounds[-1] + bh * bw * unit)
            first += t * bh * bw
        return torch.cat(order).to(self.inv_freq.device), window_bounds, image_bounds
