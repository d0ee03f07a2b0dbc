"""Multimodal rotary embedding (M-RoPE, Qwen2-VL / Qwen2.5-VL): three position axes per token.

A token has a (temporal, height, width) position; text tokens have the same value on all three. The
rotary frequencies are cut into ``mrope_section`` = ``[s_t, s_h, s_w]`` consecutive groups
(``s_t + s_h + s_w = rotary_dim / 2``), each rotated by its own axis. With equal axes this is plain
rotary, so steps without image tokens (decodes, CUDA graphs included) pass ``[num_tokens]`` positions
and take the ordinary path; steps with image tokens pass ``[3, num_tokens]``.
"""

from __future__ import annotations

import torch

from pagoda.errors import ModelLoadError
from pagoda.interfaces.ops import CustomOps
from pagoda.layers.rotary import RopeConfig, RotaryEmbedding


class MRotaryEmbedding(RotaryEmbedding):
    """Rotary embedding whose positions may be ``[3, num_tokens]`` (module docstring)."""

    def __init__(self, rope: RopeConfig, head_dim: int, ops: CustomOps, section: list[int]) -> None:
        super().__init__(rope, head_dim, ops)
        if sum(section) != rope.rotary_dim // 2:
            raise ModelLoadError(f"rope mrope_section {section} must add up to rotary_dim / 2 = {rope.rotary_dim // 2}; "
                                 "check config.json's rope_parameters")
        axis = torch.repeat_interleave(torch.arange(3), torch.tensor(section))  # [rotary_dim / 2] axis of each frequency
        self.register_buffer("axis", torch.cat([axis, axis]), persistent=False)  # cos columns, then sin columns

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if positions.dim() == 1:
            return super().forward(positions, q, k)
        rows = self.cos_sin_cache[positions]  # [3, T, rotary_dim]
        index = self.axis.to(positions.device)[None, None, :].expand(1, *rows.shape[1:])
        table = rows.gather(0, index)[0]  # [T, rotary_dim]: each frequency at its axis' position
        token = torch.arange(positions.shape[1], device=positions.device)
        self.ops.rotary_embedding(token, q, k, self.head_dim, table, self.rope.is_neox)
        return q, k
