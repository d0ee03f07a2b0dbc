"""An adapter's modules written into one slot's layout (:mod:`pagoda.lora.layout`), checked against the model.

Each module lands in the layer and shard the model maps it to (``CausalLM.lora_targets``): an unfused
module (``q_proj``) fills its slice of the fused layer; a module trained on a fused projection
(``qkv_proj``) fills every slice, its B split by the checkpoint's shard sizes. The scale is folded into B,
the rank's part of each matrix is kept, and shapes must match the base model's.

On a pipeline stage a module of a layer another stage holds is not written here; its shapes are checked
against this stage's layer of the same name and kind (decoder layers are alike), so the driver's stage
refuses an adapter that does not fit any stage before its requests run.
"""

from __future__ import annotations

import re

import torch

from pagoda.layers.pipeline import is_missing
from pagoda.lora.layout import LayerSlot, SlotLayout
from pagoda.lora.peft_files import LoRAAdapterError, LoRAModule
from pagoda.lora_request import LoRARequest

Targets = dict[str, tuple[str, str | None]]


def place_adapter(lora: LoRARequest, modules: dict[str, LoRAModule], layout: SlotLayout, targets: Targets,
                  model_name: str, out: torch.Tensor, missing: frozenset[str] = frozenset()) -> None:
    """Write ``modules`` into ``out`` ([layout.numel], zeros where the adapter has nothing); ``missing``: the
    module paths other pipeline stages hold (checked, not written)."""
    filled: set[tuple[str, int]] = set()
    for name, module in modules.items():
        elsewhere = name not in targets and is_missing(name, missing)
        path, shard = _target(lora, _same_kind_here(name, targets) if elsewhere else name, targets, model_name)
        layer = layout.layers[path]
        slices = list(range(layer.num_slices)) if shard is None else [layer.shard_names.index(shard)]
        _check_shapes(lora, name, module, layer, slices)
        if elsewhere:
            continue
        for s in slices:
            if (path, s) in filled:
                raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: two of its modules adapt the same "
                                       f"projection ({name!r} and another for {path}); keep one")
            filled.add((path, s))
        _write(module, layer, slices, out)


def _target(lora: LoRARequest, name: str, targets: Targets, model_name: str) -> tuple[str, str | None]:
    target = targets.get(name)
    if target is None:
        names = sorted({key.rpartition(".")[2] for key in targets})
        raise LoRAAdapterError(f"LoRA adapter {lora.lora_name!r}: it targets {name!r}, which {model_name} does not "
                               f"have as a linear layer Pagoda can adapt (adapters may target: {', '.join(names)}); "
                               "is it an adapter for another model?")
    return target


def _same_kind_here(name: str, targets: Targets) -> str:
    """The target of this stage's layers named as ``name`` but for its layer number (``name`` unchanged if none)."""
    pattern = re.compile(re.sub(r"\\.\d+\\.", r"\\.\\d+\\.", re.escape(name), count=1) + "$")
    return next((key for key in targets if pattern.match(key)), name)


def _check_shapes(lora: LoRARequest, name: str, module: LoRAModule, layer: LayerSlot, slices: list[int]) -> None:
    out_features = sum(layer.full_sizes[s] for s in slices)
    if module.a.shape[1] != layer.full_in_features or module.b.shape[0] != out_features:
        raise LoRAAdapterError(
            f"LoRA adapter {lora.lora_name!r}: module {name!r} maps {module.a.shape[1]} -> {module.b.shape[0]} "
            f"features, but the base model's layer maps {layer.full_in_features} -> {out_features}; the adapter "
            "was trained for another base model")


def _write(module: LoRAModule, layer: LayerSlot, slices: list[int], out: torch.Tensor) -> None:
    r = module.rank
    a = module.a.narrow(1, layer.input_start, layer.in_features)  # [r, K]: the rank's input features
    b = module.b.float() * module.scale  # [out, r]
    a_view, b_view = layer.a_view(out), layer.b_view(out)
    first_row = 0  # of the current slice in the module's B (a fused module spans several)
    for s in slices:
        start, size = layer.shard_slices[s]
        offset = layer.slices[s][0]
        a_view[s, :r].copy_(a)
        b_view[offset : offset + size, :r].copy_(b.narrow(0, first_row + start, size))
        first_row += layer.full_sizes[s]
