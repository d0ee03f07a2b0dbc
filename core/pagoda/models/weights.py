"""Checkpoint tensor names (HF) -> Pagoda parameters, including fused (stacked) layers.

A model declares ``stacked`` as ``{"q_proj": ("qkv_proj", "q"), ...}``: a checkpoint tensor
``...self_attn.k_proj.<param>`` is written into shard ``k`` of ``...self_attn.qkv_proj.<param>``
through the layer's ``load_weight(param, tensor, shard_id)``. A fused parameter counts as filled
once every shard of it has been loaded.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.layers.linear import copy_checked

Stacked = dict[str, tuple[str, str]]  # checkpoint module name -> (fused module name, shard id)


class WeightMapper:
    """Routes named checkpoint tensors into a model's parameters and reports what was filled."""

    def __init__(self, model: nn.Module, stacked: Stacked, skip: Iterable[str] = (), ignore: Iterable[str] = ()):
        self.model = model
        self.stacked = stacked
        self.skip = tuple(skip)  # substrings of names that carry nothing to load (e.g. rotary caches)
        self.ignore = set(ignore)  # exact names to drop (e.g. lm_head.weight when tied)
        self.modules = dict(model.named_modules())
        self.shards_of = _shards_of(stacked)
        self.received: dict[str, set[str | None]] = {}

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load every tensor; returns the names of the parameters that are now complete."""
        for name, tensor in weights:
            if name in self.ignore or any(s in name for s in self.skip):
                continue
            self.load_one(name, tensor)
        return self.filled()

    def target(self, name: str) -> tuple[str, str, str | None]:
        """``name`` -> (module path, parameter name, shard id or None)."""
        module_path, _, param = name.rpartition(".")
        parent, _, leaf = module_path.rpartition(".")
        if leaf in self.stacked:
            fused, shard = self.stacked[leaf]
            return (f"{parent}.{fused}" if parent else fused), param, shard
        return module_path, param, None

    def load_one(self, name: str, tensor: torch.Tensor) -> None:
        module_path, param, shard = self.target(name)
        module = self.modules.get(module_path)
        if module is None or param not in dict(module.named_parameters(recurse=False)):
            raise ModelLoadError(
                f"Unexpected tensor '{name}': {type(self.model).__name__} has no parameter for it. "
                "Check that config.json's architecture matches the checkpoint (and --quantization)."
            )
        try:
            if hasattr(module, "load_weight"):
                module.load_weight(param, tensor, shard)
            else:
                copy_checked(getattr(module, param).data, tensor)
        except ModelLoadError as exc:
            raise ModelLoadError(f"Tensor '{name}': {exc}") from None
        full = f"{module_path}.{param}" if module_path else param
        self.received.setdefault(full, set()).add(shard)

    def filled(self) -> set[str]:
        done = set()
        for full, shards in self.received.items():
            module_leaf = full.rpartition(".")[0].rpartition(".")[2]
            needed = self.shards_of.get(module_leaf)
            if None in shards or needed is None or needed <= shards:
                done.add(full)
        return done

    def checkpoint_names(self, param_name: str) -> list[str]:
        """The checkpoint tensors that fill ``param_name`` (e.g. q/k/v_proj for a qkv_proj)."""
        module_path, _, param = param_name.rpartition(".")
        parent, _, leaf = module_path.rpartition(".")
        sources = [src for src, (fused, _) in self.stacked.items() if fused == leaf]
        if not sources:
            return [param_name]
        prefix = f"{parent}." if parent else ""
        return [f"{prefix}{src}.{param}" for src in sources]


def _shards_of(stacked: Stacked) -> dict[str, set[str | None]]:
    out: dict[str, set[str | None]] = {}
    for fused, shard in stacked.values():
        out.setdefault(fused, set()).add(shard)
    return out
