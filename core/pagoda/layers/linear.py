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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.errors import ModelLoadError

if TYPE_CHECKING:
    from pagoda.interfaces.quantization import InputQuantizer, QuantizationMethod, QuantizedInput


def copy_checked(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` after checking shapes (a one-element scale may be [] or [1])."""
    scalar = dst.numel() == 1 and src.numel() == 1
    if tuple(dst.shape) != tuple(src.shape) and not scalar:
        raise ModelLoadError(
            f"checkpoint shape {tuple(src.shape)} does not match the model's {tuple(dst.shape)}"
        )
    dst.copy_(src.reshape(dst.shape))


class LinearBase(nn.Module):
    """``y = x W^T + b`` with W stored and applied by ``quant_method`` (one shard per output)."""

    def __init__(
        self,
        in_features: int,
        output_sizes: list[int],
        *,
        bias: bool,
        quant_method: "QuantizationMethod",
        dtype: torch.dtype,
    ) -> None:
        super().__init__()
        self.in_features = in_features
        self.output_sizes = list(output_sizes)
        self.out_features = sum(self.output_sizes)
        self.quant_method = quant_method
        self.input_quantizer: "InputQuantizer | None" = None  # set after loading, for the input's producers
        quant_method.create_weights(self, in_features, self.out_features, dtype)
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.out_features, dtype=dtype), requires_grad=False)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: "torch.Tensor | QuantizedInput") -> torch.Tensor:
        """``x``: [num_tokens, in_features] (or as ``input_quantizer`` made it) -> [num_tokens, out_features]."""
        return self.quant_method.apply(self, x, self.bias)

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
        copy_checked(self._param(param_name).data, tensor)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, output_sizes={self.output_sizes}, bias={self.bias is not None}"


class Linear(LinearBase):
    """A plain linear layer (o_proj, down_proj)."""

    def __init__(
        self, in_features: int, out_features: int, *, bias: bool, quant_method: "QuantizationMethod", dtype: torch.dtype
    ) -> None:
        super().__init__(in_features, [out_features], bias=bias, quant_method=quant_method, dtype=dtype)


class MergedLinear(LinearBase):
    """Several linear layers on the same input fused along the output axis (named shards)."""

    def __init__(
        self,
        in_features: int,
        shards: dict[str, int],  # shard name -> output features, in output order
        *,
        bias: bool,
        quant_method: "QuantizationMethod",
        dtype: torch.dtype,
    ) -> None:
        self.shard_names = list(shards)
        super().__init__(in_features, list(shards.values()), bias=bias, quant_method=quant_method, dtype=dtype)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        """Copy one shard's checkpoint tensor into its slice of ``param_name``."""
        if shard_id is None:  # an already fused checkpoint tensor
            return super().load_weight(param_name, tensor)
        if shard_id not in self.shard_names:
            raise ModelLoadError(f"unknown shard '{shard_id}' (shards: {', '.join(self.shard_names)})")
        copy_checked(self._shard_view(self._param(param_name), shard_id), tensor)

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
    """q, k and v projections in one matmul: output ``[q (heads*d) | k (kv*d) | v (kv*d)]``."""

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
    ) -> None:
        self.q_size = num_heads * head_dim
        self.kv_size = num_kv_heads * head_dim
        shards = {"q": self.q_size, "k": self.kv_size, "v": self.kv_size}
        super().__init__(hidden_size, shards, bias=bias, quant_method=quant_method, dtype=dtype)

    def split(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[num_tokens, q + 2 kv] -> views q [T, q_size], k [T, kv_size], v [T, kv_size]."""
        return qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
