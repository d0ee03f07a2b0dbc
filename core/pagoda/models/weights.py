"""Checkpoint tensor names (HF) -> Pagoda parameters, including fused (stacked) layers.

A model declares ``stacked`` as ``{"q_proj": ("qkv_proj", "q"), ...}``: a checkpoint tensor
``...self_attn.k_proj.<param>`` is written into shard ``k`` of ``...self_attn.qkv_proj.<param>``
through the layer's ``load_weight(param, tensor, shard_id)``. A fused parameter counts as filled
once every shard of it has been loaded.

Mixture-of-experts layers store all experts in stacked parameters (see
:class:`pagoda.layers.moe.FusedMoE`). A model declares ``experts`` as
``{"w1": "gate", "w3": "up", "w2": "down"}``: ``...experts.<e>.w1.weight`` goes to the
``experts`` module's ``w13_weight`` as shard ``"<e>.gate"``; the module's ``required_shards``
says when a stacked parameter is complete. ``renames`` rewrites checkpoint name fragments first
(e.g. Mixtral's ``.block_sparse_moe.`` -> ``.mlp.``).
"""

from __future__ import annotations

import re
from typing import Iterable

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.layers.attention import Attention, kv_scale_target
from pagoda.layers.linear import LinearBase, copy_checked
from pagoda.layers.pipeline import is_missing, missing_paths

Stacked = dict[str, tuple[str, str]]  # checkpoint module name -> (fused module name, shard id)
Experts = dict[str, str]  # checkpoint projection name inside experts.<e> -> "gate" | "up" | "down"
EXPERT_TENSOR = re.compile(r"^(?P<module>.+\.experts)\.(?P<expert>\d+)\.(?P<proj>\w+)\.weight$")
EXPERT_PARAMS = {"gate": "w13_weight", "up": "w13_weight", "down": "w2_weight"}


class WeightMapper:
    """Routes named checkpoint tensors into a model's parameters and reports what was filled."""

    def __init__(self, model: nn.Module, stacked: Stacked, skip: Iterable[str] = (), ignore: Iterable[str] = (),
                 experts: Experts | None = None, renames: dict[str, str] | None = None):
        self.model = model
        self.stacked = stacked
        self.experts = experts or {}
        self.renames = renames or {}
        self.skip = tuple(skip)  # substrings of names that carry nothing to load (e.g. rotary caches)
        self.ignore = set(ignore)  # exact names to drop (e.g. lm_head.weight when tied)
        self.modules = dict(model.named_modules())
        self.missing = missing_paths(model)  # layers another pipeline stage holds: their tensors are skipped
        self.shards_of = _shards_of(stacked)
        self.received: dict[str, set[str | None]] = {}

    def load(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Load every tensor; returns the names of the parameters that are now complete."""
        for name, tensor in weights:
            self.load_named(name, tensor)
        return self.filled()

    def load_named(self, name: str, tensor: torch.Tensor) -> None:
        """Load one checkpoint tensor by its checkpoint name (dropped if ignored or skipped)."""
        if name in self.ignore or any(s in name for s in self.skip):
            return
        name = self.rename(name)
        if is_missing(name, self.missing):
            return
        if not self._load_kv_scale(name, tensor):
            self.load_one(name, tensor)

    def _load_kv_scale(self, name: str, tensor: torch.Tensor) -> bool:
        """A KV cache scale (``self_attn.k_scale`` and kin) goes to the attention layer under its block."""
        found = kv_scale_target(name)
        if found is None or self._has_param(name):
            return False
        owner, which = found
        layer = next((m for path, m in self.modules.items() if path.startswith(owner + ".") and isinstance(m, Attention)),
                     None)
        if layer is None:
            return False  # load_one names the unexpected tensor
        for scale in which:
            layer.load_kv_scale(scale, tensor)
        return True

    def _has_param(self, name: str) -> bool:
        module_path, param, _ = self.target(name)
        module = self.modules.get(module_path)
        return module is not None and param in dict(module.named_parameters(recurse=False))

    def rename(self, name: str) -> str:
        for old, new in self.renames.items():
            name = name.replace(old, new)
        return name

    def target(self, name: str) -> tuple[str, str, str | None]:
        """``name`` -> (module path, parameter name, shard id or None)."""
        expert = EXPERT_TENSOR.match(name) if self.experts else None
        if expert and expert["proj"] in self.experts:
            kind = self.experts[expert["proj"]]
            return expert["module"], EXPERT_PARAMS[kind], f"{expert['expert']}.{kind}"
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
            module_path, _, param = full.rpartition(".")
            required = getattr(self.modules.get(module_path), "required_shards", None)
            needed = required(param) if required else self.shards_of.get(module_path.rpartition(".")[2])
            if None in shards or needed is None or needed <= shards:
                done.add(full)
        return done

    def checkpoint_names(self, param_name: str) -> list[str]:
        """The checkpoint tensors that fill ``param_name`` (e.g. q/k/v_proj for a qkv_proj)."""
        module_path, _, param = param_name.rpartition(".")
        parent, _, leaf = module_path.rpartition(".")
        if param in EXPERT_PARAMS.values() and self.experts:
            return self._expert_names(module_path, param)
        sources = [src for src, (fused, _) in self.stacked.items() if fused == leaf]
        if not sources:
            return [param_name]
        prefix = f"{parent}." if parent else ""
        return [f"{prefix}{src}.{param}" for src in sources]

    def lora_targets(self) -> dict[str, tuple[str, str | None]]:
        """HF module name -> (linear layer path, shard id or None: the whole layer) for every linear layer
        (``CausalLM.lora_targets``): a fused layer under its own name and under its shards' HF names."""
        targets: dict[str, tuple[str, str | None]] = {}
        for path, module in self.modules.items():
            if not isinstance(module, LinearBase):
                continue
            targets[path] = (path, None)
            for name in self.checkpoint_names(f"{path}.weight"):
                _, _, shard = self.target(name)
                targets[self._original(name).removesuffix(".weight")] = (path, shard)
        return targets

    def _expert_names(self, module_path: str, param: str) -> list[str]:
        required = getattr(self.modules.get(module_path), "required_shards", lambda _: set())(param)
        proj_of = {kind: proj for proj, kind in self.experts.items()}
        names = []
        for shard in sorted(required):
            expert, _, kind = shard.partition(".")
            names.append(self._original(f"{module_path}.{expert}.{proj_of[kind]}.weight"))
        return names

    def _original(self, name: str) -> str:
        """The checkpoint's spelling of a (renamed) tensor name."""
        for old, new in self.renames.items():
            name = name.replace(new, old)
        return name


def _shards_of(stacked: Stacked) -> dict[str, set[str | None]]:
    out: dict[str, set[str | None]] = {}
    for fused, shard in stacked.values():
        out.setdefault(fused, set()).add(shard)
    return out
