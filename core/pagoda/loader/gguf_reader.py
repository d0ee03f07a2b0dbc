"""Read llama.cpp GGUF checkpoints: dequantize each tensor and rename it to its HF name.

The file is parsed by :mod:`pagoda.loader.gguf_file` and every tensor dequantized to float32 by
:mod:`pagoda.loader.gguf_quants` (F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0 and the K-quants
Q2_K-Q6_K). llama.cpp stores the q/k projections of the ``llama`` architecture with the rows of
each head interleaved (it converts HF's rotate-halves layout to rotate-pairs); :func:`unpermute_qk`
restores HF's layout. Gemma's norms hold ``1 + weight`` in GGUF and ``weight`` in HF checkpoints:
the reader subtracts the 1 so every reader yields HF's tensors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Collection, Iterator

import torch

from pagoda.errors import ModelLoadError
from pagoda.loader.gguf_file import GGUFFile, TensorInfo
from pagoda.loader.gguf_quants import dequantize

# GGUF architecture -> whether its q/k rows are permuted by llama.cpp's converter.
ARCHITECTURES = {"llama": True, "mistral": True, "qwen2": False, "qwen3": False, "gemma3": False}
NORMS_PLUS_ONE = {"gemma3"}  # architectures whose GGUF norm weights hold 1 + HF's weight
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
ARCHITECTURE_LAYER_NAMES = {  # where an architecture's layer names differ from LAYER_NAMES
    "gemma3": {
        "post_attention_norm": "post_attention_layernorm",  # after attention, before the residual add
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    },
}
SKIPPED = {"rope_freqs"}  # llama3 frequency factors: Pagoda computes them from the config
_LAYER = re.compile(r"^blk\.(\d+)\.(\w+)\.(weight|bias)$")
_GLOBAL = re.compile(r"^(\w+)\.(weight|bias)$")


def hf_name(gguf_name: str, architecture: str = "llama") -> str | None:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``; None to skip."""
    if m := _LAYER.match(gguf_name):
        layer, kind, suffix = m.groups()
        names = {**LAYER_NAMES, **ARCHITECTURE_LAYER_NAMES.get(architecture, {})}
        if kind in names:
            return f"model.layers.{layer}.{names[kind]}.{suffix}"
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


class GGUFReader:
    """Iterates ``(hf_name, dense float32 tensor)`` over a GGUF file; ``current_file`` is that file."""

    def __init__(self, path: Path, hf_config: Any) -> None:
        self.current_file = self.location = str(path)
        self.file = GGUFFile(path)
        self.architecture = self.file.string("general.architecture") or "?"
        if self.architecture not in ARCHITECTURES:
            raise ModelLoadError(
                f"GGUF file {path} holds a '{self.architecture}' model; Pagoda reads GGUF models of architecture "
                f"{', '.join(ARCHITECTURES)}. Use the HF safetensors checkpoint instead."
            )
        self.num_heads = int(hf_config.num_attention_heads)
        self.num_kv_heads = int(getattr(hf_config, "num_key_value_heads", None) or self.num_heads)

    @property
    def num_tensors(self) -> int:
        return len(self.file.tensors)

    def tensors(self, only: Collection[str] | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for info in self.file.tensors.values():
            name = hf_name(info.name, self.architecture)
            if name is None or (only is not None and name not in only):  # skipped before dequantizing
                continue
            yield name, self._dense(info, name)

    def _dense(self, info: TensorInfo, name: str) -> torch.Tensor:
        try:
            weights = dequantize(self.file.raw(info), info.ggml_type, info.shape)  # [out, in] (or [n]) float32
        except ModelLoadError as exc:
            raise ModelLoadError(f"Tensor '{info.name}' in {self.current_file}: {exc}") from None
        if ARCHITECTURES[self.architecture]:
            if ".self_attn.q_proj." in name:
                weights = unpermute_qk(weights, self.num_heads)
            elif ".self_attn.k_proj." in name:
                weights = unpermute_qk(weights, self.num_kv_heads)
        if self.architecture in NORMS_PLUS_ONE and name.endswith("norm.weight"):
            weights = weights - 1.0
        return weights
