"""The two checkpoint layouts: which parameters a layer gets (the checkpoint's names, sharded the way
the loader narrows them) and how they are read back as :class:`GroupedWeights`.

Per linear layer with ``K`` inputs, ``N`` outputs, ``G`` groups, ``p = 32 / bits`` values per int32:

| GPTQ | compressed-tensors | shape | packed along |
| --- | --- | --- | --- |
| ``qweight`` | ``weight_packed`` | ``[K/p, N]`` / ``[N, K/p]`` | inputs |
| ``qzeros`` | ``weight_zero_point`` (asymmetric only) | ``[G, N/p]`` / ``[N/p, G]`` | outputs |
| ``scales`` | ``weight_scale`` | ``[G, N]`` / ``[N, G]`` | - |
| ``g_idx`` | ``weight_g_idx`` (actorder "group" only) | ``[K]`` | - |
| - | ``weight_shape`` | ``[2]`` (read, not used) | - |

Tensor parallelism: packed weights split along their axes like any weight; scales and zero points
are never split along the inputs (a row-parallel rank loads every group and keeps those of its
rows: with act-order any row may belong to any group). ``g_idx`` follows the rows; fused layers
keep one per shard (``shard_indexed``), which must agree: the layer has one input order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda_quant_gptq.config import GroupedIntConfig
from pagoda_quant_gptq.grouped import GroupedWeights
from pagoda_quant_gptq.packing import unpack_columns, unpack_rows

AWQ_PACK = 8  # the kernels' layouts pack 8 output columns per int32


def _param(data: torch.Tensor, output_dim: int | None = 0, input_dim: int | None = None, pack: int = 1,
           input_pack: int = 1, shard_indexed: bool = False) -> nn.Parameter:
    """A checkpoint parameter with the shard-loading attributes of pagoda.layers.linear."""
    param = nn.Parameter(data, requires_grad=False)
    param.output_dim, param.input_dim, param.shard_indexed = output_dim, input_dim, shard_indexed
    param.pack_factor, param.input_pack_factor = pack, input_pack
    return param


class CheckpointFormat(ABC):
    """Creates a layer's checkpoint parameters and reads them back as integers."""

    names: tuple[str, ...] = ()  # parameters created (removed after the repack)
    g_idx_name = ""  # the checkpoint's name of the row order

    def __init__(self, config: GroupedIntConfig) -> None:
        self.config = config

    def create(self, layer: nn.Module, k: int, n: int) -> None:
        """Register the parameters of a layer with (this rank's) ``k`` inputs and ``n`` outputs."""
        cfg, pack = self.config, self.config.pack_factor
        outputs = getattr(layer, "output_sizes", [n])
        if k % pack or any(size % pack for size in outputs) or n % AWQ_PACK:
            raise ModelLoadError(
                f"{cfg.source} {cfg.bits}-bit weights pack {pack} values per int32: this layer's {k} inputs and its "
                f"outputs {outputs} must be multiples of {pack} (and {n} outputs a multiple of {AWQ_PACK})"
            )
        groups = cfg.groups(_full_inputs(layer, k))
        self._create(layer, k, n, groups)
        if self.stores_g_idx:
            setattr(layer, self.g_idx_name, _g_idx_param(layer, k))

    @property
    def stores_g_idx(self) -> bool:
        """Whether checkpoints of this format hold a ``g_idx`` (loaded even where it is not needed)."""
        return self.config.act_order

    @abstractmethod
    def _create(self, layer: nn.Module, k: int, n: int, groups: int) -> None: ...

    @abstractmethod
    def read(self, layer: nn.Module) -> GroupedWeights:
        """The loaded parameters as integers, scales and the group of each of this rank's rows."""

    def release(self, layer: nn.Module) -> None:
        """Drop the checkpoint parameters (after the repack)."""
        for name in self.names + (self.g_idx_name,):
            if name in layer._parameters:
                delattr(layer, name)

    def _zeros(self, stored: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
        """``[G, N]`` zero points: the symmetric one, or the stored ones plus the format's offset."""
        if self.config.sym or stored is None:
            return torch.full(like.shape, self.config.sym_zero, dtype=torch.int16, device=like.device)
        return stored.to(torch.int16) + self.config.zero_offset

    def _gid(self, layer: nn.Module, k: int, groups: int) -> torch.Tensor:
        """``[K]`` group of each of this rank's rows: the checkpoint's ``g_idx`` with act-order, else
        consecutive groups of ``group_size`` (counted from the rank's first row)."""
        g_idx = getattr(layer, self.g_idx_name).data if self.config.act_order else None
        if g_idx is not None and not self._column_order(g_idx):
            return _checked_g_idx(g_idx, groups, self.config.source)
        rows = torch.arange(k, device=layer._parameters[self.names[0]].device) + _first_row(layer, k)
        return torch.zeros_like(rows) if groups == 1 else rows // self.config.group_size

    def _column_order(self, g_idx: torch.Tensor) -> bool:
        """Whether a loaded ``g_idx`` stands for the plain column order."""
        return False


class GptqFormat(CheckpointFormat):
    """AutoGPTQ's layout (also GPTQModel's and optimum's)."""

    names = ("qweight", "qzeros", "scales")
    g_idx_name = "g_idx"
    stores_g_idx = True  # every GPTQ export stores g_idx; without act-order it is k // group_size and unused

    def _create(self, layer: nn.Module, k: int, n: int, groups: int) -> None:
        pack = self.config.pack_factor
        layer.qweight = _param(torch.empty(k // pack, n, dtype=torch.int32), output_dim=1, input_dim=0,
                               input_pack=pack)
        layer.qzeros = _param(torch.empty(groups, n // pack, dtype=torch.int32), output_dim=1, pack=pack,
                              input_dim=None)
        layer.scales = _param(torch.empty(groups, n, dtype=torch.float32), output_dim=1, input_dim=None)

    def read(self, layer: nn.Module) -> GroupedWeights:
        bits, k = self.config.bits, layer.qweight.shape[0] * self.config.pack_factor
        scales = layer.scales.data
        zeros = None if self.config.sym else unpack_columns(layer.qzeros.data, bits)
        return GroupedWeights(unpack_rows(layer.qweight.data, bits), self._zeros(zeros, scales), scales,
                              self._gid(layer, k, scales.shape[0]), bits)


class CompressedTensorsFormat(CheckpointFormat):
    """compressed-tensors ``pack-quantized`` (llm-compressor's W4A16 / W8A16 exports)."""

    names = ("weight_packed", "weight_scale", "weight_zero_point", "weight_shape")
    g_idx_name = "weight_g_idx"

    def _create(self, layer: nn.Module, k: int, n: int, groups: int) -> None:
        pack = self.config.pack_factor
        layer.weight_packed = _param(torch.empty(n, k // pack, dtype=torch.int32), output_dim=0, input_dim=1,
                                     input_pack=pack)
        layer.weight_scale = _param(torch.empty(n, groups, dtype=torch.float32), output_dim=0, input_dim=None)
        if not self.config.sym:
            layer.weight_zero_point = _param(torch.empty(n // pack, groups, dtype=torch.int32), output_dim=0,
                                             pack=pack, input_dim=None)
        layer.weight_shape = _param(torch.empty(2, dtype=torch.int64), output_dim=None, input_dim=None)

    def read(self, layer: nn.Module) -> GroupedWeights:
        bits = self.config.bits
        q = unpack_columns(layer.weight_packed.data, bits).t().contiguous()  # [K, N]
        scales = layer.weight_scale.data.t().contiguous()  # [G, N]
        stored = None if self.config.sym else unpack_rows(layer.weight_zero_point.data, bits).t()
        return GroupedWeights(q, self._zeros(stored, scales), scales, self._gid(layer, q.shape[0], scales.shape[0]),
                              bits)

    def _column_order(self, g_idx: torch.Tensor) -> bool:
        return bool((g_idx == -1).any())  # compressed-tensors' mark of a g_idx never set


def _full_inputs(layer: nn.Module, k: int) -> int:
    """All ranks' inputs of a layer whose rank holds ``k`` (row-parallel layers split them)."""
    return k * layer.tp.size if getattr(layer, "parallel", None) == "row" else k


def _first_row(layer: nn.Module, k: int) -> int:
    return layer.tp.rank * k if getattr(layer, "parallel", None) == "row" else 0


def _g_idx_param(layer: nn.Module, k: int) -> nn.Parameter:
    """One ``[K]`` row order per layer; fused layers keep one per shard, checked alike at the repack."""
    shards = len(getattr(layer, "shard_names", ()) or ())
    if shards > 1:
        return _param(torch.empty(shards, k, dtype=torch.int32), output_dim=None, shard_indexed=True)
    return _param(torch.empty(k, dtype=torch.int32), output_dim=None, input_dim=0)


def _checked_g_idx(g_idx: torch.Tensor, groups: int, source: str) -> torch.Tensor:
    """The layer's ``[K]`` groups from its (per-shard) ``g_idx``, refused with the reason if unusable."""
    if g_idx.dim() == 2:
        differ = [i for i in range(1, g_idx.shape[0]) if not torch.equal(g_idx[i], g_idx[0])]
        if differ:
            raise ModelLoadError(
                f"{source} act-order: the shards of a fused layer (e.g. q/k/v_proj, gate/up_proj) hold different g_idx "
                f"(shard {differ[0]} differs from shard 0); Pagoda permutes a layer's input once, so its shards need one "
                "input order. Quantize those projections with one activation order (the usual export does)."
            )
        g_idx = g_idx[0]
    bad = (g_idx < 0) | (g_idx >= groups)
    if bool(bad.any()):
        raise ModelLoadError(
            f"{source} g_idx holds {int(bad.sum())} of {g_idx.numel()} values outside the layer's groups 0..{groups - 1} "
            f"(e.g. {int(g_idx[bad][0])}): the checkpoint is corrupt or does not fit this config. With --load-format "
            "dummy use a config without act-order (desc_act false): random g_idx are not groups."
        )
    return g_idx.long()
