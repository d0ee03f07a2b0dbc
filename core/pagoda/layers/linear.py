"""Linear layers whose parameters and matmul belong to the model's QuantizationMethod.

A layer calls ``quant_method.create_weights(layer, in_features, out_features, dtype)`` once,
then ``quant_method.apply(layer, x, bias)`` on every forward, and the loader calls
``process_weights_after_loading`` after the checkpoint is in. The layer owns only the bias.

Shard-loading convention (how :class:`MergedLinear` writes one checkpoint tensor, e.g.
``k_proj.weight``, into its slice of a fused parameter such as ``qkv_proj.weight``). A
quantization method may set these attributes on the parameters it creates:

- ``param.output_dim`` (int, default ``0``): the axis that holds output features. ``None``
  means the parameter is shared by all shards and each shard's tensor is copied whole.
- ``param.pack_factor`` (int, default ``1``): output features per stored element along
  ``output_dim`` (e.g. 8 for int4 values packed into int32 along the output axis).
- ``param.shard_indexed`` (bool, default ``False``): the parameter holds one entry per shard
  along axis 0 (e.g. one fp8 scale per q/k/v); shard ``i`` is written at index ``i``.

``layer.output_sizes`` (one entry per shard) is set before ``create_weights`` runs, so a
method can size per-shard parameters.

Tensor parallelism (``tp.size > 1``, see docs/distributed.md). A *column-parallel* layer
(``parallel="column"``: qkv_proj, gate_up_proj) keeps a slice of each shard's output features;
a *row-parallel* one (``parallel="row"``: o_proj, down_proj) keeps a slice of its input features
and sums the partial outputs over the ranks (one all-reduce; the bias is added once, after it).
``create_weights`` receives the rank's sizes (``layer.output_sizes`` too), so a method sizes its
parameters per rank without knowing about ranks. Loading narrows each checkpoint tensor to the
rank's slice before copying it (a lazy safetensors slice reads only those bytes), along:

- ``param.output_dim`` / ``param.pack_factor`` (above) in a column-parallel layer;
- ``param.input_dim`` in a row-parallel layer: default, for a 2-D parameter, the axis that is
  not ``output_dim`` if it has ``in_features`` entries, else ``None`` (not split: e.g. a
  ``[out, 1]`` per-channel scale); ``param.input_pack_factor`` (default ``1``): input features
  per stored element along it (e.g. ``group_size`` for AWQ's per-group scales and zeros).

``shard_indexed`` and ``output_dim=None`` parameters are copied whole on every rank.

A row-parallel layer without bias may leave its sum to the consumer of its output
(:meth:`LinearBase.defer_all_reduce`): the decoder's residual-add RMSNorm then sums and normalises
in one call (:meth:`pagoda.layers.norm.RMSNorm.take_all_reduce_of`).

Output deltas (LoRA adapters, docs/lora.md). :meth:`LinearBase.attach_delta` gives a layer an
:class:`OutputDelta`, added to the quantization method's output on every forward: it sees the
layer's plain input (the layer stops asking its input's producers for a ``QuantizedInput``) and
this rank's output features (row-parallel: this rank's partial sums, before they are summed, so the
delta's own partial products are summed with them). A delta works with every quantization method,
since it only needs ``apply``'s output laid out as the layer's output features.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch
from torch import nn

from pagoda.interfaces.parallel import SINGLE, TensorParallel
from pagoda.errors import ModelLoadError
from pagoda.layers.sharding import materialize, narrow

if TYPE_CHECKING:
    from pagoda.interfaces.quantization import InputQuantizer, QuantizationMethod, QuantizedInput


def copy_checked(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` after checking shapes (a one-element scale may be [] or [1])."""
    src = materialize(src)
    scalar = dst.numel() == 1 and src.numel() == 1
    if tuple(dst.shape) != tuple(src.shape) and not scalar:
        raise ModelLoadError(
            f"checkpoint shape {tuple(src.shape)} does not match the model's {tuple(dst.shape)}"
        )
    dst.copy_(src.reshape(dst.shape))


class OutputDelta(Protocol):
    """What a layer adds to its quantization method's output (a LoRA adapter's ``x A^T B^T``)."""

    def add_to(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``x`` [num_tokens, in_features] (this rank's), ``y`` [num_tokens, out_features] (this rank's, bias
        included unless row-parallel) -> ``y`` plus the delta (``y`` may be updated in place)."""


class LinearBase(nn.Module):
    """``y = x W^T + b`` with W stored and applied by ``quant_method`` (one shard per output).

    ``in_features`` and ``output_sizes`` are the full (checkpoint) sizes; under tensor
    parallelism the layer keeps the rank's part (see the module docstring) and
    ``self.in_features`` / ``self.output_sizes`` are the rank's sizes.
    """

    def __init__(
        self,
        in_features: int,
        output_sizes: list[int],
        *,
        bias: bool,
        quant_method: "QuantizationMethod",
        dtype: torch.dtype,
        tp: TensorParallel = SINGLE,
        parallel: str | None = None,
        shard_slices: list[tuple[int, int]] | None = None,
    ) -> None:
        super().__init__()
        self.tp = tp if parallel is not None else SINGLE
        self.parallel = parallel if self.tp.size > 1 else None
        # per shard: (start, size) of the rank's output features within the checkpoint's shard
        self.shard_slices = shard_slices or [self._column_slice(size) for size in output_sizes]
        self.in_features = self._row_size(in_features)
        self.full_output_sizes = list(output_sizes)  # per shard, the checkpoint's (all ranks')
        self.output_sizes = [size for _, size in self.shard_slices]
        self.out_features = sum(self.output_sizes)
        self.quant_method = quant_method
        self.input_quantizer: "InputQuantizer | None" = None  # set after loading, for the input's producers
        self.partial_output = False  # row-parallel: return this rank's partial sums (defer_all_reduce)
        self.delta: OutputDelta | None = None  # added to the output (attach_delta)
        quant_method.create_weights(self, self.in_features, self.out_features, dtype)
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.out_features, dtype=dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def _column_slice(self, size: int) -> tuple[int, int]:
        if self.parallel != "column":
            return 0, size
        if size % self.tp.size:
            raise ModelLoadError(f"{size} output features do not split over tensor_parallel_size {self.tp.size}")
        return self.tp.rank * (size // self.tp.size), size // self.tp.size

    def _row_size(self, in_features: int) -> int:
        if self.parallel != "row":
            return in_features
        if in_features % self.tp.size:
            raise ModelLoadError(f"{in_features} input features do not split over tensor_parallel_size {self.tp.size}")
        return in_features // self.tp.size

    def forward(self, x: "torch.Tensor | QuantizedInput") -> torch.Tensor:
        """``x``: [num_tokens, in_features] (or as ``input_quantizer`` made it) -> [num_tokens, out_features]."""
        if self.parallel != "row":
            y = self.quant_method.apply(self, x, self.bias)
            return y if self.delta is None else self.delta.add_to(x, y)
        y = self.quant_method.apply(self, x, None)  # this rank's partial sums
        if self.delta is not None:
            y = self.delta.add_to(x, y)  # its partial products are summed with the layer's
        if self.partial_output:
            return y  # the consumer sums them (defer_all_reduce)
        y = self.tp.all_reduce(y)
        return y if self.bias is None else y + self.bias

    def attach_delta(self, delta: OutputDelta | None) -> None:
        """Add ``delta`` to this layer's output from now on (None: remove it). The layer then takes plain
        input tensors: the producers of its input stop quantizing it for the method (``input_quantizer``)."""
        self.delta = delta
        if delta is not None:
            self.input_quantizer = None

    def defer_all_reduce(self) -> bool:
        """From now on return this rank's partial sums and leave the all-reduce to the caller, which must
        sum them. True if done: row-parallel layers without bias only (the bias comes after the sum)."""
        if self.parallel != "row" or self.bias is not None:
            return False
        self.partial_output = True
        return True

    def rank_slice(self, param: nn.Parameter, tensor, shard_index: int = 0):
        """The part of checkpoint ``tensor`` (for shard ``shard_index``) that this rank keeps."""
        if self.parallel is None or getattr(param, "shard_indexed", False):
            return tensor
        if self.parallel == "column":
            dim, pack = getattr(param, "output_dim", 0), getattr(param, "pack_factor", 1)
            start, size = self.shard_slices[shard_index]
        else:
            dim, pack = _input_dim(param, self.in_features), getattr(param, "input_pack_factor", 1)
            start, size = self.tp.rank * self.in_features, self.in_features
        if dim is None:
            return tensor
        if start % pack or size % pack:
            raise ModelLoadError(
                f"the rank's slice [{start}, {start + size}) is not aligned to the {pack} features packed per "
                f"element; tensor_parallel_size {self.tp.size} cannot split this layer"
            )
        return narrow(tensor, dim, start // pack, size // pack)

    def process_weights_after_loading(self) -> None:
        self.quant_method.process_weights_after_loading(self)
        self.input_quantizer = self.quant_method.input_quantizer(self)

    def _param(self, name: str) -> nn.Parameter:
        param = self._parameters.get(name)
        if param is None:
            created = ", ".join(n for n, p in self._parameters.items() if p is not None)
            raise ModelLoadError(
                f"the layer has no parameter '{name}' (it has: {created}); "
                "is the checkpoint quantized with a different method than --quantization?"
            )
        return param

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        """Copy a checkpoint tensor into parameter ``param_name`` (whole: no shards here)."""
        if shard_id is not None:
            raise ModelLoadError(f"this layer has no shard '{shard_id}'")
        param = self._param(param_name)
        copy_checked(param.data, self.rank_slice(param, tensor))

    def extra_repr(self) -> str:
        tp = f", {self.parallel}-parallel rank {self.tp.rank}/{self.tp.size}" if self.parallel else ""
        return f"in_features={self.in_features}, output_sizes={self.output_sizes}, bias={self.bias is not None}{tp}"


def _input_dim(param: nn.Parameter, in_features: int) -> int | None:
    """The axis of ``param`` along input features (see the module docstring), or None."""
    if hasattr(param, "input_dim"):
        return param.input_dim
    output_dim = getattr(param, "output_dim", 0)
    if param.dim() != 2 or output_dim not in (0, 1):
        return None
    dim = 1 - output_dim
    return dim if param.shape[dim] == in_features else None


class Linear(LinearBase):
    """A plain linear layer (o_proj, down_proj: row-parallel under tensor parallelism)."""

    def __init__(
        self, in_features: int, out_features: int, *, bias: bool, quant_method: "QuantizationMethod",
        dtype: torch.dtype, tp: TensorParallel = SINGLE, parallel: str | None = None,
    ) -> None:
        super().__init__(in_features, [out_features], bias=bias, quant_method=quant_method, dtype=dtype, tp=tp,
                         parallel=parallel)


class MergedLinear(LinearBase):
    """Several linear layers on the same input fused along the output axis (named shards)."""

    def __init__(
        self,
        in_features: int,
        shards: dict[str, int],  # shard name -> output features, in output order (full sizes)
        *,
        bias: bool,
        quant_method: "QuantizationMethod",
        dtype: torch.dtype,
        tp: TensorParallel = SINGLE,
        shard_slices: list[tuple[int, int]] | None = None,  # default: an equal part of each shard per rank
    ) -> None:
        self.shard_names = list(shards)
        super().__init__(in_features, list(shards.values()), bias=bias, quant_method=quant_method, dtype=dtype,
                         tp=tp, parallel="column", shard_slices=shard_slices)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        """Copy (the rank's slice of) one shard's checkpoint tensor into its place in ``param_name``."""
        if shard_id is None:  # an already fused checkpoint tensor
            if self.parallel is not None:
                raise ModelLoadError("a fused checkpoint tensor cannot be split over tensor-parallel ranks")
            return super().load_weight(param_name, tensor)
        if shard_id not in self.shard_names:
            raise ModelLoadError(f"unknown shard '{shard_id}' (shards: {', '.join(self.shard_names)})")
        param = self._param(param_name)
        index = self.shard_names.index(shard_id)
        copy_checked(self._shard_view(param, shard_id), self.rank_slice(param, tensor, index))

    def _shard_view(self, param: nn.Parameter, shard_id: str) -> torch.Tensor:
        index = self.shard_names.index(shard_id)
        if getattr(param, "shard_indexed", False):
            return param.data[index]
        dim = getattr(param, "output_dim", 0)
        if dim is None:
            return param.data
        pack = getattr(param, "pack_factor", 1)
        offset = sum(self.output_sizes[:index]) // pack
        return param.data.narrow(dim, offset, self.output_sizes[index] // pack)


class QKVLinear(MergedLinear):
    """q, k and v projections in one matmul: output ``[q (heads*d) | k (kv*d) | v (kv*d)]``.

    Under tensor parallelism each rank keeps ``num_heads / tp`` query heads and its KV heads:
    ``num_kv_heads / tp`` of them, or (``tp > num_kv_heads``) the one KV head its query heads use,
    replicated on ``tp / num_kv_heads`` ranks (see :func:`rank_heads`).
    """

    def __init__(
        self,
        hidden_size: int,
        head_dim: int,
        num_heads: int,
        num_kv_heads: int,
        *,
        bias: bool,
        quant_method: "QuantizationMethod",
        dtype: torch.dtype,
        tp: TensorParallel = SINGLE,
    ) -> None:
        heads, kv_heads, q_start, kv_start = rank_heads(num_heads, num_kv_heads, tp.rank, tp.size)
        self.q_size = heads * head_dim
        self.kv_size = kv_heads * head_dim
        full = {"q": num_heads * head_dim, "k": num_kv_heads * head_dim, "v": num_kv_heads * head_dim}
        kv = (kv_start * head_dim, self.kv_size)
        super().__init__(hidden_size, full, bias=bias, quant_method=quant_method, dtype=dtype, tp=tp,
                         shard_slices=[(q_start * head_dim, self.q_size), kv, kv])

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[num_tokens, q + 2 kv] -> views q [T, q_size], k [T, kv_size], v [T, kv_size]."""
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)


def rank_heads(num_heads: int, num_kv_heads: int, rank: int, tp_size: int) -> tuple[int, int, int, int]:
    """``(query heads, kv heads, first query head, first kv head)`` of tensor-parallel ``rank``.

    Query heads split evenly. KV heads split evenly when ``tp_size <= num_kv_heads``; otherwise
    each rank keeps the one KV head its query heads share, replicated on ``tp_size / num_kv_heads``
    ranks. :func:`check_tensor_parallel` says which sizes work.
    """
    heads = num_heads // tp_size
    if tp_size <= num_kv_heads:
        kv = num_kv_heads // tp_size
        return heads, kv, rank * heads, rank * kv
    return heads, 1, rank * heads, rank // (tp_size // num_kv_heads)
