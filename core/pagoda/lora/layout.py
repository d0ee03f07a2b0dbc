"""Where each linear layer's adapter matrices sit in one adapter slot (this rank's part of them).

Every linear layer an adapter may target (``CausalLM.lora_targets``) gets, per slot, ``a [S, R, K]``
(one A per output slice: q/k/v of a fused qkv projection, gate/up, or the one slice of o/down) and
``b [N, R]`` (the slices' B rows in the layer's output order, the scale folded in), with ``R`` =
``max_lora_rank`` (smaller ranks are zero-padded) and ``K``/``N`` this tensor-parallel rank's input and
output features. One slot is one flat buffer of all layers' matrices (:class:`SlotLayout`): an adapter's
host copy has that layout, so loading it into a device slot is one copy.

Tensor parallelism slices the matrices as the base layer is sliced: a column-parallel layer (qkv,
gate/up) keeps the rank's rows of each slice's B and all of A; a row-parallel one (o, down) keeps the
rank's columns of A and all of B (its partial products are summed with the layer's own).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pagoda.layers.linear import LinearBase

ALIGN = 64  # elements: every matrix starts 64-element (128+ byte) aligned in a slot


@dataclass
class LayerSlot:
    """One linear layer's part of a slot (this rank's)."""

    path: str
    shard_names: list[str | None]  # the layer's shards (None: a plain layer of one shard)
    full_sizes: list[int]  # each shard's output features in the checkpoint (all ranks)
    shard_slices: list[tuple[int, int]]  # the rank's (start, size) within each checkpoint shard
    in_features: int  # the rank's
    full_in_features: int  # the checkpoint's
    input_start: int  # the rank's first input feature (row-parallel), else 0
    rank: int  # R: max_lora_rank
    a_offset: int  # elements into the slot
    b_offset: int

    @property
    def num_slices(self) -> int:
        return len(self.shard_slices)

    @property
    def out_features(self) -> int:
        return sum(size for _, size in self.shard_slices)

    @property
    def slices(self) -> list[tuple[int, int]]:
        """(offset, size) of each slice in the rank's output features."""
        offsets = [sum(size for _, size in self.shard_slices[:i]) for i in range(self.num_slices)]
        return [(offset, size) for offset, (_, size) in zip(offsets, self.shard_slices)]

    @property
    def a_numel(self) -> int:
        return self.num_slices * self.rank * self.in_features

    def a_view(self, slot: torch.Tensor) -> torch.Tensor:
        """``slot`` [..., numel] -> this layer's A [..., S, R, K]."""
        flat = slot[..., self.a_offset : self.a_offset + self.a_numel]
        return flat.view(*slot.shape[:-1], self.num_slices, self.rank, self.in_features)

    def b_view(self, slot: torch.Tensor) -> torch.Tensor:
        """``slot`` [..., numel] -> this layer's B [..., N, R]."""
        flat = slot[..., self.b_offset : self.b_offset + self.out_features * self.rank]
        return flat.view(*slot.shape[:-1], self.out_features, self.rank)


@dataclass
class SlotLayout:
    """All layers' parts of one slot, by layer path; ``numel`` elements in all."""

    layers: dict[str, LayerSlot]
    numel: int
    rank: int


def slot_layout(model: torch.nn.Module, rank: int, targets: dict[str, tuple[str, str | None]]) -> SlotLayout:
    """The layout of the linear layers ``targets`` name (they must be LinearBase layers)."""
    modules = dict(model.named_modules())
    layers, offset = {}, 0
    for path in dict.fromkeys(path for path, _ in targets.values()):
        layer = modules.get(path)
        if not isinstance(layer, LinearBase):
            raise TypeError(f"{type(model).__name__}.lora_targets names {path!r}, which is not a "
                            "pagoda.layers.linear layer; LoRA attaches only to those")
        slot = _layer_slot(path, layer, rank, offset)
        offset = _aligned(slot.b_offset + slot.out_features * rank)
        layers[path] = slot
    return SlotLayout(layers, offset, rank)


def _layer_slot(path: str, layer: LinearBase, rank: int, offset: int) -> LayerSlot:
    row = layer.parallel == "row"
    full_in = layer.in_features * layer.tp.size if row else layer.in_features
    slot = LayerSlot(path=path, shard_names=list(getattr(layer, "shard_names", [None])),
                     full_sizes=list(layer.full_output_sizes), shard_slices=list(layer.shard_slices),
                     in_features=layer.in_features, full_in_features=full_in,
                     input_start=layer.tp.rank * layer.in_features if row else 0, rank=rank,
                     a_offset=offset, b_offset=0)
    slot.b_offset = _aligned(offset + slot.a_numel)
    return slot


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN
