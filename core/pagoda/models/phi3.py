"""Phi-3 (and Phi-3.5-mini, Phi-4-mini): the Llama decoder, with the checkpoint's q/k/v and gate/up
already fused and LongRoPE scaling.

The checkpoint's ``qkv_proj.weight`` ([q | k | v] rows) and ``gate_up_proj.weight`` ([gate | up]
rows) are split back into their shards while loading, so the fused layers load them like any
other checkpoint (tensor-parallel ranks keep their rows of each shard). LongRoPE (``rope_type``
``longrope``, formerly ``su``) lives in :mod:`pagoda.layers.rotary`; a model-wide ``sliding_window``
applies to every layer.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch

from pagoda.errors import ModelLoadError
from pagoda.models import spec
from pagoda.models.llama import LlamaForCausalLM

FUSED = {  # fused checkpoint name fragment -> the fragments of its shards, in row order
    ".self_attn.qkv_proj.": (".self_attn.q_proj.", ".self_attn.k_proj.", ".self_attn.v_proj."),
    ".mlp.gate_up_proj.": (".mlp.gate_proj.", ".mlp.up_proj."),
}


def fused_rows(hf_config: Any, fused: str) -> list[int]:
    """Rows of each shard of a fused checkpoint tensor, in order."""
    if fused == ".mlp.gate_up_proj.":
        return [int(hf_config.intermediate_size)] * 2
    d = spec.head_dim(hf_config)
    kv = spec.num_kv_heads(hf_config) * d
    return [int(hf_config.num_attention_heads) * d, kv, kv]


def split_fused(weights: Iterable[tuple[str, torch.Tensor]], hf_config: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``...qkv_proj.weight`` as ``q_proj``/``k_proj``/``v_proj`` tensors (and gate_up as gate/up)."""
    for name, tensor in weights:
        fused = next((f for f in FUSED if f in name), None)
        if fused is None:
            yield name, tensor
            continue
        rows = fused_rows(hf_config, fused)
        if tensor.shape[0] != sum(rows):
            raise ModelLoadError(f"Tensor '{name}' has {tensor.shape[0]} rows; the config implies {sum(rows)} "
                                 f"({' + '.join(map(str, rows))}). Check that config.json belongs to this checkpoint.")
        for part, piece in zip(FUSED[fused], tensor.split(rows, dim=0)):
            yield name.replace(fused, part), piece


class Phi3ForCausalLM(LlamaForCausalLM):
    """Phi-3 family: no biases; fused checkpoint tensors split at load."""

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        return self.weight_mapper().load(split_fused(weights, self.config))

    def checkpoint_names(self, param_name: str) -> list[str]:
        """The checkpoint names its parameters: fused tensors carry the fused layers' own names."""
        return [param_name]
