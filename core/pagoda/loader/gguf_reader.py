"""Read llama.cpp GGUF checkpoints: dequantize each tensor and rename it to its HF name.

Tensors of type F32/F16/BF16/Q4_0/Q4_1/Q8_0 (and any other type ``gguf.quants`` can
dequantize) become dense float tensors at load. llama.cpp stores the q/k projections of the
``llama`` architecture with the rows of each head interleaved (it converts HF's rotate-halves
layout to rotate-pairs); :func:`unpermute_qk` restores HF's layout.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from pagoda.errors import ModelLoadError

# GGUF architecture -> whether its q/k rows are permuted by llama.cpp's converter.
ARCHITECTURES = {"llama": True, "mistral": True, "qwen2": False, "qwen3": False}
GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
SKIPPED = {"rope_freqs"}  # llama3 frequency factors: Pagoda computes them from the config
_LAYER = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
_GLOBAL = re.compile(r"^(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str) -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None to skip."""
    if m := _LAYER.match(gguf_name):
        layer, kind, suffix = m.groups()
        if kind in LAYER_NAMES:
            return f"model.layers.{layer}.{LAYER_NAMES[kind]}.{suffix}"
    elif m := _GLOBAL.match(gguf_name):
        kind, suffix = m.groups()
        if kind in SKIPPED:
            return None
        if kind in GLOBAL_NAMES:
            return f"{GLOBAL_NAMES[kind]}.{suffix}"
    return gguf_name  # unknown: reported by the model as an unexpected tensor


def unpermute_qk(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's per-head row interleave: rows (i, half) -> (half, i) within each head."""
    rows = w.shape[0]
    half = rows // num_heads // 2
    return w.reshape(num_heads, half, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _string_field(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8")


class GGUFReader:
    """Iterates ``(hf_name, dense tensor)`` over a GGUF file; ``current_file`` is that file."""

    def __init__(self, path: Path, hf_config: Any) -> None:
        import gguf

        self.current_file = self.location = str(path)
        try:
            self.reader = gguf.GGUFReader(str(path))
        except Exception as exc:
            raise ModelLoadError(
                f"Cannot read GGUF file {path}: {exc}. It is corrupt or truncated; copy it again."
            ) from exc
        self.architecture = _string_field(self.reader, "general.architecture") or "?"
        if self.architecture not in ARCHITECTURES:
            raise ModelLoadError(
                f"GGUF file {path} holds a '{self.architecture}' model; Pagoda reads GGUF models of architecture "
                f"{', '.join(ARCHITECTURES)}. Use the HF safetensors checkpoint instead."
            )
        self.num_heads = int(hf_config.num_attention_heads)
        self.num_kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or self.num_heads)

    @property
    def num_tensors(self) -> int:
        return len(self.reader.tensors)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for tensor in self.reader.tensors:
            name = hf_name(tensor.name)
            if name is None:
                continue
            yield name, self._dense(tensor, name)

    def _dense(self, tensor: Any, name: str) -> torch.Tensor:
        from gguf.quants import dequantize

        try:
            array = dequantize(tensor.data, tensor.tensor_type)  # [out, in] (or [n]); float32 or float16
        except NotImplementedError as exc:
            raise ModelLoadError(
                f"Tensor '{tensor.name}' in {self.current_file} has GGUF type {tensor.tensor_type.name}, which "
                f"cannot be dequantized here ({exc}); use a Q4_0/Q4_1/Q8_0/F16/F32 GGUF file."
            ) from exc
        weights = torch.from_numpy(np.array(array, copy=True))
        if ARCHITECTURES[self.architecture]:
            if ".self_attn.q_proj." in name:
                weights = unpermute_qk(weights, self.num_heads)
            elif ".self_attn.k_proj." in name:
                weights = unpermute_qk(weights, self.num_kv_heads)
        return weights
