"""Rotary position embedding: a cos/sin cache per position, applied in place through ``CustomOps``.

Scaling types: ``default``, ``linear`` (positions divided by ``factor``) and ``llama3``
(per-frequency: long wavelengths divided by ``factor``, short ones kept, a smooth blend
between). The rope parameters are read from either layout of HF configs: ``rope_parameters``
(transformers v5) or ``rope_theta`` + ``rope_scaling`` (earlier versions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.layers.ops import CustomOps

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")
DEFAULT_ROPE_THETA = 10000.0


@dataclass(frozen=True)
class RopeConfig:
    """Everything that decides the rotary cache of one model."""

    theta: float
    rotary_dim: int
    max_position: int
    rope_type: str = "default"
    scaling: dict[str, Any] = field(default_factory=dict)  # factor, low/high_freq_factor, ...
    is_neox: bool = True  # rotate halves (Llama/Qwen); False: interleaved pairs (GPT-J)


def _rope_dicts(hf_config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(rope_parameters, rope_scaling)`` as plain dicts (either may be empty)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params and "rope_theta" not in params and all(isinstance(v, dict) for v in params.values()):
        params = dict(params.get("full_attention") or next(iter(params.values())))  # per layer type
    scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
    return params, scaling


def rope_config_from_hf(hf_config: Any, head_dim: int) -> RopeConfig:
    """Read theta, scaling and the rotary fraction from an HF config of any transformers version."""
    params, scaling = _rope_dicts(hf_config)
    merged = {**scaling, **params}
    theta = merged.get("rope_theta", getattr(hf_config, "rope_theta", None)) or DEFAULT_ROPE_THETA
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"rope scaling type '{rope_type}' in the model config is not supported "
            f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)}); remove rope_scaling to run without it."
        )
    partial = merged.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)) or 1.0
    max_position = int(getattr(hf_config, "max_position_embeddings", 0) or 4096)
    scaling = {k: v for k, v in merged.items() if k not in ("type", "rope_type", "rope_theta")}
    return RopeConfig(float(theta), int(head_dim * partial), max_position, rope_type, scaling)


def inverse_frequencies(rope: RopeConfig) -> torch.Tensor:
    """[rotary_dim / 2] float32 angular frequencies after scaling."""
    exponents = torch.arange(0, rope.rotary_dim, 2, dtype=torch.int64).float() / rope.rotary_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv_freq / float(rope.scaling["factor"])
    if rope.rope_type == "llama3":
        return _llama3_scale(inv_freq, rope.scaling)
    return inv_freq


def _llama3_scale(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    original = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = ((original / wavelen - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves, 1: short
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > original / low, inv_freq / factor, blended)
    return torch.where(wavelen < original / high, inv_freq, scaled)


def cos_sin_cache(rope: RopeConfig, device: torch.device | None = None) -> torch.Tensor:
    """[max_position, rotary_dim] float32: cos of each frequency, then sin."""
    inv_freq = inverse_frequencies(rope).to(device)
    positions = torch.arange(rope.max_position, dtype=torch.float32, device=device)
    angles = positions[:, None] * inv_freq[None, :]  # [max_position, rotary_dim / 2]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotates the first ``rotary_dim`` features of each q/k head in place, by position."""

    def __init__(self, rope: RopeConfig, head_dim: int, ops: CustomOps) -> None:
        super().__init__()
        self.rope = rope
        self.head_dim = head_dim
        self.ops = ops
        device = torch.get_default_device()
        self.register_buffer("cos_sin_cache", cos_sin_cache(rope, device), persistent=False)

    def forward(
        self,
        positions: torch.Tensor,  # [num_tokens]
        q: torch.Tensor,  # [num_tokens, num_heads * head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.ops.rotary_embedding(positions, q, k, self.head_dim, self.cos_sin_cache, self.rope.is_neox)
        return q, k

    def extra_repr(self) -> str:
        r = self.rope
        return f"theta={r.theta}, rotary_dim={r.rotary_dim}, max_position={r.max_position}, type={r.rope_type}"
