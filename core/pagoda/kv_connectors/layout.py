"""This rank's KV cache as a connector sees it (:class:`~pagoda.interfaces.kv_connector.KVCacheLayout`),
and the namespace that keeps another model's (or layout's) blocks from ever matching.

The namespace digests what makes stored KV valid: the model (config.json and the weight files' names and
sizes, the dtype, the quantization), the cache's element type and FP8 scales, the block layout, and this
rank among the tensor-parallel ranks (each stores its own heads). A changed checkpoint whose files keep
their names and sizes is not told apart: clear the store after replacing weights in place.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from pagoda.config import EngineConfig
from pagoda.interfaces.attention import AttentionBackend
from pagoda.interfaces.kv_connector import KVCacheLayout
from pagoda.layers.attention import Attention
from pagoda.loader import resolve_model

FORMAT_VERSION = 1
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


def block_axis(attention: AttentionBackend) -> int:
    """The axis of a layer's cache tensor that indexes blocks (the one that grows with the block count)."""
    one, two = attention.kv_cache_shape(1), attention.kv_cache_shape(2)
    axes = [i for i, (a, b) in enumerate(zip(one, two)) if a != b]
    if len(axes) != 1:
        raise ValueError(f"cannot find the block axis of the KV cache shape {one} (for 2 blocks: {two})")
    return axes[0]


def cache_layout(config: EngineConfig, attention: AttentionBackend, kv_caches: list[torch.Tensor], model,
                 rank: int, world_size: int) -> KVCacheLayout:
    """The layout of ``kv_caches`` (this rank's, one tensor per layer) and its namespace."""
    axis = block_axis(attention)
    shape = list(attention.kv_cache_shape(1))
    del shape[axis]
    dtype = kv_caches[0].dtype
    facts = {
        "format": FORMAT_VERSION, "model": model_fingerprint(config), "cache_dtype": str(dtype),
        "kv_cache_dtype": config.kv_cache_dtype, "scales": kv_scales(model) if attention.spec.kv_quantized else None,
        "layers": len(kv_caches), "block_shape": shape, "block_size": config.block_size, "rank": rank,
        "world_size": world_size,
    }
    namespace = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:32]
    return KVCacheLayout(len(kv_caches), tuple(shape), dtype, config.block_size, rank, world_size, namespace)


def model_fingerprint(config: EngineConfig) -> str:
    """A digest of the model as loaded: config.json, the weight files' names and sizes, dtype, quantization
    (and the seed of random ``dummy`` weights)."""
    source = resolve_model(config.model)
    digest = hashlib.sha256(json.dumps([config.dtype, config.quantization, config.load_format,
                                        config.seed if config.load_format == "dummy" else None]).encode())
    folder = Path(source.path)
    if source.gguf_file is not None:
        files = [folder / source.gguf_file]
    else:
        files = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES or p.name == "config.json")
    for path in files:
        digest.update(f"{path.name}:{path.stat().st_size}".encode())
        if path.name == "config.json":
            digest.update(path.read_bytes())
    return digest.hexdigest()


def kv_scales(model: torch.nn.Module) -> list[list[float]]:
    """Each attention layer's FP8 cache scales (k, v): blocks stored with other scales read back wrong."""
    return [[float(m.kv_scales.k_scale), float(m.kv_scales.v_scale)] for m in model.modules()
            if isinstance(m, Attention) and getattr(m, "kv_scales", None) is not None]
