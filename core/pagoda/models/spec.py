"""Shape facts the engine needs before building a model, read from any supported HF config.

The engine calls :func:`attention_spec` to create the attention backend (which the model's
layers then use) and :func:`num_kv_cache_layers` to allocate one KV cache per layer, without
knowing the architecture.
"""

from __future__ import annotations

from typing import Any

import torch

from pagoda.errors import ModelLoadError
from pagoda.interfaces.attention import AttentionBackend, AttentionSpec, MLASpec
from pagoda.layers.linear import rank_heads
from pagoda.layers.rotary import rope_config_from_hf, yarn_factor, yarn_mscale

SOFT_CAPPED_ATTENTION = {"gemma2"}  # model types whose attention applies attn_logit_softcapping


def head_dim(hf_config: Any) -> int:
    """``head_dim`` from the config when present, else ``hidden_size / num_attention_heads``."""
    explicit = getattr(hf_config, "head_dim", None)
    if explicit:
        return int(explicit)
    return int(hf_config.hidden_size) // int(hf_config.num_attention_heads)


def num_kv_heads(hf_config: Any) -> int:
    """``num_key_value_heads`` (GQA/MQA), defaulting to ``num_attention_heads`` (MHA)."""
    return int(getattr(hf_config, "num_key_value_heads", None) or hf_config.num_attention_heads)


def num_kv_cache_layers(hf_config: Any) -> int:
    """How many attention layers need their own KV cache."""
    return int(hf_config.num_hidden_layers)


def layer_is_sliding(hf_config: Any) -> list[bool]:
    """Per layer: does it attend only within ``sliding_window``?

    Uses ``layer_types`` when the config has it (transformers v5); else Qwen2/Qwen3's
    ``use_sliding_window`` with ``max_window_layers``; else any ``sliding_window`` applies to all.
    """
    n = num_kv_cache_layers(hf_config)
    window = getattr(hf_config, "sliding_window", None)
    if not window or getattr(hf_config, "use_sliding_window", True) is False:
        return [False] * n
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types:
        return [t == "sliding_attention" for t in layer_types[:n]]
    if hasattr(hf_config, "use_sliding_window"):  # Qwen2/3 before layer_types existed
        first = getattr(hf_config, "max_window_layers", 0) or 0
        return [i >= first for i in range(n)]
    return [True] * n


def sliding_window(hf_config: Any) -> int | None:
    """The window of the model's sliding-window layers, or ``None`` if it has none."""
    return int(hf_config.sliding_window) if any(layer_is_sliding(hf_config)) else None


def has_mixed_windows(hf_config: Any) -> bool:
    """Do sliding-window layers alternate with full-attention ones (Gemma 3, some Qwen2 configs)?"""
    flags = layer_is_sliding(hf_config)
    return any(flags) and not all(flags)


def layer_attention(backend: AttentionBackend, hf_config: Any, layer_idx: int) -> AttentionBackend:
    """The attention backend layer ``layer_idx`` calls: the engine's, or for a mixed-window model
    its view with this layer's window (the selection already refused backends that cannot)."""
    if not backend.spec.mixed_windows:
        return backend
    return backend.with_window(backend.spec.sliding_window if layer_is_sliding(hf_config)[layer_idx] else None)


def mla_spec(hf_config: Any) -> MLASpec | None:
    """The latent sizes of a multi-head latent attention model (DeepSeek-V2/V3: ``kv_lora_rank``), else None."""
    rank = getattr(hf_config, "kv_lora_rank", None)
    return MLASpec(int(rank), int(hf_config.qk_rope_head_dim)) if rank else None


def mla_softmax_scale(hf_config: Any) -> float:
    """``(qk_nope_head_dim + qk_rope_head_dim) ** -0.5``, times ``mscale(factor, mscale_all_dim) ** 2`` under
    YaRN: DeepSeek scales every score (not only the rotary part, which YaRN's cos/sin factor covers)."""
    scale = float(int(hf_config.qk_nope_head_dim) + int(hf_config.qk_rope_head_dim)) ** -0.5
    rope = rope_config_from_hf(hf_config, int(hf_config.qk_rope_head_dim))
    all_dim = rope.scaling.get("mscale_all_dim")
    if rope.rope_type == "yarn" and all_dim:
        scale *= yarn_mscale(yarn_factor(rope), float(all_dim)) ** 2
    return scale


def attention_soft_cap(hf_config: Any) -> float | None:
    """``attn_logit_softcapping`` where the architecture applies it (Gemma 2). Gemma 3 configs carry the key
    too, but Gemma 3 does not cap attention scores (transformers ignores it; the released configs set null)."""
    if getattr(hf_config, "model_type", None) not in SOFT_CAPPED_ATTENTION:
        return None
    return getattr(hf_config, "attn_logit_softcapping", None) or None


def attention_scale(hf_config: Any) -> float:
    """Scores are scaled by ``query_pre_attn_scalar ** -0.5`` (Gemma) or ``head_dim ** -0.5``."""
    return float(getattr(hf_config, "query_pre_attn_scalar", None) or head_dim(hf_config)) ** -0.5


def check_tensor_parallel(hf_config: Any, tp_size: int) -> None:
    """Raise ValueError unless the model's heads and MLP split over ``tp_size`` ranks."""
    if tp_size == 1:
        return
    heads, kv_heads = int(hf_config.num_attention_heads), num_kv_heads(hf_config)
    fix = f"use a tensor_parallel_size that divides {heads}"
    if heads % tp_size:
        raise ValueError(f"tensor_parallel_size {tp_size} does not divide num_attention_heads ({heads}); {fix}")
    if mla_spec(hf_config) is not None:  # one latent, replicated on every rank: no KV heads to split
        kv_heads = tp_size
    if kv_heads >= tp_size and kv_heads % tp_size:
        raise ValueError(f"tensor_parallel_size {tp_size} does not divide num_key_value_heads ({kv_heads}); {fix} "
                         f"and {kv_heads}")
    if kv_heads < tp_size and tp_size % kv_heads:
        raise ValueError(f"num_key_value_heads ({kv_heads}) cannot be replicated over tensor_parallel_size {tp_size} "
                         f"(it must be a multiple of {kv_heads}); {fix}")
    for key in ("intermediate_size", "moe_intermediate_size"):  # the dense MLP's and (MoE) each expert's
        inter = getattr(hf_config, key, None)
        if inter and int(inter) % tp_size:
            raise ValueError(f"tensor_parallel_size {tp_size} does not divide {key} ({inter})")


def attention_spec(hf_config: Any, block_size: int, dtype: torch.dtype, tp_size: int = 1) -> AttentionSpec:
    """The AttentionSpec of this model's layers, for one of ``tp_size`` tensor-parallel ranks (its
    heads; the KV cache holds only those). A mixed-window model's layers use views of the backend
    with their own window (:func:`layer_attention`). A multi-head latent attention model's ranks each cache the
    whole latent, one "KV head" of ``latent_size`` (``AttentionSpec.mla``)."""
    mla = mla_spec(hf_config)
    if mla is not None:
        check_tensor_parallel(hf_config, tp_size)
        return AttentionSpec(num_heads=int(hf_config.num_attention_heads) // tp_size, num_kv_heads=1,
                             head_size=mla.latent_size, scale=mla_softmax_scale(hf_config), block_size=block_size,
                             dtype=dtype, mla=mla)
    d = head_dim(hf_config)
    heads, kv_heads = int(hf_config.num_attention_heads), num_kv_heads(hf_config)
    if heads % kv_heads:
        raise ModelLoadError(
            f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads}); check config.json."
        )
    check_tensor_parallel(hf_config, tp_size)
    heads, kv_heads, _, _ = rank_heads(heads, kv_heads, 0, tp_size)
    return AttentionSpec(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_size=d,
        scale=attention_scale(hf_config),
        block_size=block_size,
        dtype=dtype,
        sliding_window=sliding_window(hf_config),
        logits_soft_cap=attention_soft_cap(hf_config),
        mixed_windows=has_mixed_windows(hf_config),
    )


def pipeline_stages(hf_config: Any, pp_size: int, partition: list[int] | None = None) -> list[tuple[int, int]]:
    """The decoder layers ``[start, end)`` of each of ``pp_size`` pipeline stages: ``partition`` (layers per
    stage, in order) if given, else an even split. ValueError naming the sizes when they do not fit."""
    n = num_kv_cache_layers(hf_config)
    if partition is not None:
        if len(partition) != pp_size or min(partition) < 1 or sum(partition) != n:
            raise ValueError(f"pp_layer_partition {','.join(map(str, partition))} must give each of the "
                             f"{pp_size} pipeline stages at least one layer and sum to num_hidden_layers ({n})")
        counts = list(partition)
    elif pp_size > n:
        raise ValueError(f"pipeline_parallel_size {pp_size} exceeds num_hidden_layers ({n}): every stage needs a "
                         f"layer; use a pipeline_parallel_size of at most {n}")
    elif n % pp_size:
        example = ",".join(str(n // pp_size + (i < n % pp_size)) for i in range(pp_size))
        raise ValueError(f"pipeline_parallel_size {pp_size} does not divide num_hidden_layers ({n}); split the "
                         f"layers yourself with pp_layer_partition (--pp-layer-partition {example})")
    else:
        counts = [n // pp_size] * pp_size
    ends = [sum(counts[: i + 1]) for i in range(pp_size)]
    return [(end - count, end) for end, count in zip(ends, counts)]
