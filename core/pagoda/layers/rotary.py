"""Rotary position embedding: a cos/sin cache per position, applied in place through ``CustomOps``.

Scaling types: ``default``, ``linear`` (positions divided by ``factor``), ``llama3``
(per-frequency: long wavelengths divided by ``factor``, short ones kept, a smooth blend
between), ``yarn`` (the same blend over a ramp of rotation counts ``beta_fast``..``beta_slow``, and cos/sin
times YaRN's attention factor; DeepSeek's ``mscale``/``mscale_all_dim``: :func:`yarn_attention_factor`) and
``longrope`` (Phi-3: per-frequency ``short_factor`` / ``long_factor`` divisors and
an attention factor on cos/sin; see :meth:`RotaryEmbedding.rope_positions`). The rope parameters
are read from either layout of HF configs: ``rope_parameters`` (transformers v5, possibly one
set per layer type, as Gemma 3's local/global layers) or ``rope_theta`` + ``rope_scaling``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.ops import CustomOps

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn", "longrope")
ROPE_TYPE_ALIASES = {"su": "longrope", "deepseek_yarn": "yarn"}  # Phi-3's before transformers 4.42; DeepSeek's own
DEFAULT_ROPE_THETA = 10000.0
FULL, SLIDING = "full_attention", "sliding_attention"  # HF's layer types


@dataclass(frozen=True)
class RopeConfig:
    """Everything that decides the rotary cache of one model."""

    theta: float
    rotary_dim: int
    max_position: int
    rope_type: str = "default"
    scaling: dict[str, Any] = field(default_factory=dict)  # factor, low/high_freq_factor, ...
    is_neox: bool = True  # rotate halves (Llama/Qwen); False: interleaved pairs (GPT-J)


def _rope_dicts(hf_config: Any, layer_type: str = FULL) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(rope_parameters, rope_scaling)`` of ``layer_type``'s layers as plain dicts (either may be empty)."""
    params = dict(getattr(hf_config, "rope_parameters", None) or {})
    if params and "rope_theta" not in params and all(isinstance(v, dict) for v in params.values()):
        params = dict(params.get(layer_type) or params.get(FULL) or next(iter(params.values())))  # per layer type
    elif layer_type == SLIDING and getattr(hf_config, "rope_local_base_freq", None):  # Gemma 3 before v5
        return {"rope_theta": hf_config.rope_local_base_freq, "rope_type": "default"}, {}
    scaling = dict(getattr(hf_config, "rope_scaling", None) or {})
    return params, scaling


def rope_config_from_hf(hf_config: Any, head_dim: int, layer_type: str = FULL) -> RopeConfig:
    """Read theta, scaling and the rotary fraction (of ``layer_type``'s layers) from an HF config of any
    transformers version."""
    params, scaling = _rope_dicts(hf_config, layer_type)
    merged = {**scaling, **params}
    theta = merged.get("rope_theta", getattr(hf_config, "rope_theta", None)) or DEFAULT_ROPE_THETA
    rope_type = merged.get("rope_type") or merged.get("type") or "default"
    rope_type = ROPE_TYPE_ALIASES.get(rope_type, rope_type)
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ModelLoadError(
            f"rope scaling type '{rope_type}' in the model config is not supported "
            f"(supported: {', '.join(SUPPORTED_ROPE_TYPES)}); remove rope_scaling to run without it."
        )
    partial = merged.get("partial_rotary_factor", getattr(hf_config, "partial_rotary_factor", 1.0)) or 1.0
    max_position = int(getattr(hf_config, "max_position_embeddings", 0) or 4096)
    scaling = {k: v for k, v in merged.items() if k not in ("type", "rope_type", "rope_theta")}
    if rope_type in ("longrope", "yarn"):
        scaling.setdefault("original_max_position_embeddings", getattr(hf_config, "original_max_position_embeddings",
                                                                       None) or max_position)
    return RopeConfig(float(theta), int(head_dim * partial), max_position, rope_type, scaling)


def inverse_frequencies(rope: RopeConfig) -> torch.Tensor:
    """[rotary_dim / 2] float32 angular frequencies after scaling."""
    exponents = torch.arange(0, rope.rotary_dim, 2, dtype=torch.int64).float() / rope.rotary_dim
    inv_freq = 1.0 / (rope.theta**exponents)
    if rope.rope_type == "linear":
        return inv_freq / float(rope.scaling["factor"])
    if rope.rope_type == "llama3":
        return _llama3_scale(inv_freq, rope.scaling)
    if rope.rope_type == "yarn":
        return _yarn_scale(inv_freq, rope)
    return inv_freq


def yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction ``0.1 * mscale * ln(factor) + 1`` (1 when not extended)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_factor(rope: RopeConfig) -> float:
    """``factor``, defaulting to ``max_position / original_max_position_embeddings``."""
    s = rope.scaling
    return float(s.get("factor") or rope.max_position / float(s["original_max_position_embeddings"]))


def yarn_attention_factor(rope: RopeConfig) -> float:
    """What cos/sin are multiplied by: ``attention_factor``, else (DeepSeek) ``mscale(factor, mscale) /
    mscale(factor, mscale_all_dim)`` when both are set, else ``mscale(factor)``."""
    s, factor = rope.scaling, yarn_factor(rope)
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    if s.get("mscale") and s.get("mscale_all_dim"):
        return yarn_mscale(factor, float(s["mscale"])) / yarn_mscale(factor, float(s["mscale_all_dim"]))
    return yarn_mscale(factor)


def _yarn_scale(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    """Frequencies that turn fewer than ``beta_slow`` times over the original context are divided by ``factor``,
    those turning more than ``beta_fast`` times kept, a linear ramp between (over the frequency index)."""
    s, dim, base = rope.scaling, rope.rotary_dim, rope.theta
    original = float(s["original_max_position_embeddings"])

    def index_of(rotations: float) -> float:  # the frequency index turning ``rotations`` times over ``original``
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = index_of(float(s.get("beta_fast") or 32)), index_of(float(s.get("beta_slow") or 1))
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)).clamp(0.0, 1.0)
    keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
    return inv_freq / yarn_factor(rope) * (1 - keep) + inv_freq * keep


def _llama3_scale(inv_freq: torch.Tensor, s: dict[str, Any]) -> torch.Tensor:
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    original = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    smooth = ((original / wavelen - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves, 1: short
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelen > original / low, inv_freq / factor, blended)
    return torch.where(wavelen < original / high, inv_freq, scaled)


def _cos_sin(inv_freq: torch.Tensor, max_position: int, device: torch.device | None) -> torch.Tensor:
    positions = torch.arange(max_position, dtype=torch.float32, device=device)
    angles = positions[:, None] * inv_freq.to(device)[None, :]  # [max_position, rotary_dim / 2]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


def cos_sin_cache(rope: RopeConfig, device: torch.device | None = None) -> torch.Tensor:
    """[max_position, rotary_dim] float32: cos of each frequency, then sin (YaRN: times its attention factor).
    LongRoPE: [2 * max_position, rotary_dim], the short-factor rows then the long-factor rows, both times the
    attention factor."""
    if rope.rope_type == "longrope":
        return _longrope_cache(rope, device)
    cache = _cos_sin(inverse_frequencies(rope), rope.max_position, device)
    return cache * yarn_attention_factor(rope) if rope.rope_type == "yarn" else cache


def longrope_attention_factor(rope: RopeConfig) -> float:
    """The cos/sin multiplier: ``attention_factor``, else ``sqrt(1 + ln(factor) / ln(original))`` where
    ``factor`` defaults to ``max_position / original_max_position_embeddings`` (1 when not extended)."""
    s = rope.scaling
    if s.get("attention_factor") is not None:
        return float(s["attention_factor"])
    original = float(s["original_max_position_embeddings"])
    factor = float(s.get("factor") or rope.max_position / original)
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def _longrope_cache(rope: RopeConfig, device: torch.device | None) -> torch.Tensor:
    exponents = torch.arange(0, rope.rotary_dim, 2, dtype=torch.int64).float() / rope.rotary_dim
    base = rope.theta**exponents  # [rotary_dim / 2]
    halves = []
    for key in ("short_factor", "long_factor"):
        factors = torch.tensor(rope.scaling[key], dtype=torch.float32)
        if factors.shape != base.shape:
            raise ModelLoadError(f"rope_scaling.{key} has {factors.numel()} entries; this model needs "
                                 f"{base.numel()} (rotary dimension / 2). Check config.json.")
        halves.append(_cos_sin(1.0 / (factors * base), rope.max_position, device))
    return torch.cat(halves) * longrope_attention_factor(rope)


class RotaryEmbedding(nn.Module):
    """Rotates the first ``rotary_dim`` features of each q/k head in place, by position."""

    def __init__(self, rope: RopeConfig, head_dim: int, ops: CustomOps) -> None:
        super().__init__()
        self.rope = rope
        self.head_dim = head_dim
        self.ops = ops
        device = torch.get_default_device()
        self.register_buffer("cos_sin_cache", cos_sin_cache(rope, device), persistent=False)

    def rope_positions(self, positions: torch.Tensor, metadata: Any) -> torch.Tensor:
        """The cache rows of ``positions`` ([num_tokens]). LongRoPE: the tokens of a sequence whose context
        (``metadata.seq_lens``) exceeds ``original_max_position_embeddings`` take the long-factor rows, the
        others the short ones, as transformers decides per forward pass. Each step decides for its own
        tokens: keys cached before a sequence crossed the limit keep their short rotation (transformers'
        generate instead recomputes its cache once, at the crossing; see docs/models.md)."""
        if self.rope.rope_type != "longrope":
            return positions
        starts, seq_lens = metadata.query_start_loc, metadata.seq_lens
        token = torch.arange(positions.shape[0], dtype=starts.dtype, device=positions.device)
        seq = torch.searchsorted(starts[1:], token, right=True).clamp_(max=seq_lens.shape[0] - 1)  # [num_tokens]
        long = seq_lens[seq] > int(self.rope.scaling["original_max_position_embeddings"])
        return positions + long.to(positions.dtype) * self.rope.max_position

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
