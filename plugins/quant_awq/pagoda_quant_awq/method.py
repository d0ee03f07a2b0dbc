"""The ``awq`` quantization method: AutoAWQ GEMM-format 4-bit weights in every linear layer.

Parameters (the checkpoint's names and layouts, loaded as they are, shard by shard for fused
layers: both packed tensors are packed along the output axis, 8 columns per int32):

- ``qweight`` int32 ``[in, out/8]``, ``qzeros`` int32 ``[in/group, out/8]`` (AWQ nibble order),
- ``scales`` ``[in/group, out]`` (fp16 in the checkpoint; kept fp16 for fp16/bf16 models).

``process_weights_after_loading`` repacks them, where the tensor-core kernel runs (NVIDIA sm_80+,
fp16/bf16, see ``dispatch.tiles_reason``), into the tiles layout (:mod:`pagoda_quant_awq.tiles`):
``awq_weights``, ``awq_scales``, ``awq_zeros`` and the buffer ``awq_locks`` replace the three
checkpoint tensors. ``apply`` runs the kernel that :mod:`pagoda_quant_awq.dispatch` picks for the
layout and batch size; on CPU the torch reference.
"""

from __future__ import annotations

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.quantization import QuantizationMethod
from pagoda_quant_awq.config import AwqConfig
from pagoda_quant_awq.packing import PACK
from pagoda_quant_awq.tiles import AwqTiles


class AwqMethod(QuantizationMethod):
    description = "AWQ 4-bit weights (AutoAWQ GEMM format), fused dequant-matmul kernels on GPUs"

    def __init__(self, quant_config: dict | None = None) -> None:
        super().__init__(quant_config)
        self.config = AwqConfig.from_dict(quant_config)

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        group = self.config.group_size
        _check_sizes(in_features, getattr(layer, "output_sizes", [out_features]), group)
        scale_dtype = torch.float16 if dtype in (torch.float16, torch.bfloat16) else dtype
        layer.qweight = _packed(torch.empty(in_features, out_features // PACK, dtype=torch.int32))
        layer.qzeros = _packed(torch.empty(in_features // group, out_features // PACK, dtype=torch.int32))
        layer.scales = nn.Parameter(torch.empty(in_features // group, out_features, dtype=scale_dtype),
                                    requires_grad=False)
        layer.scales.output_dim = 1
        for grouped in (layer.qzeros, layer.scales):  # one row per group of input features (tensor parallelism)
            grouped.input_dim, grouped.input_pack_factor = 0, group
        layer.awq_dtype = dtype

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        from pagoda_quant_awq.dispatch import tiles_reason
        from pagoda_quant_awq.tiles import repack

        k, n = layer.qweight.shape[0], layer.scales.shape[1]
        if tiles_reason(layer.qweight.device, layer.awq_dtype, k, n, self.config.group_size) is not None:
            return  # the checkpoint layout stays (CPU, fp32, other GPUs, N not a multiple of 64)
        tiles = repack(layer.qweight.data, layer.qzeros.data, layer.scales.data, self.config.group_size,
                       layer.awq_dtype)
        for name in ("qweight", "qzeros", "scales"):
            delattr(layer, name)
        layer.awq_weights = nn.Parameter(tiles.weights, requires_grad=False)
        layer.awq_scales = nn.Parameter(tiles.scales, requires_grad=False)
        layer.awq_zeros = nn.Parameter(tiles.zeros, requires_grad=False)
        layer.register_buffer("awq_locks", tiles.locks, persistent=False)

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        from pagoda_quant_awq.dispatch import awq_linear, awq_tiles_linear

        if hasattr(layer, "awq_weights"):
            return awq_tiles_linear(x, tiles_of(layer, self.config.group_size), bias)
        return awq_linear(x, layer.qweight, layer.qzeros, layer.scales, self.config.group_size, bias)


def tiles_of(layer: nn.Module, group_size: int) -> AwqTiles:
    """The tiles-layout tensors of a repacked layer."""
    return AwqTiles(layer.awq_weights, layer.awq_scales, layer.awq_zeros, layer.awq_locks, group_size)


def _packed(data: torch.Tensor) -> nn.Parameter:
    param = nn.Parameter(data, requires_grad=False)
    param.output_dim = 1  # packed along the output axis: shard offsets divide by pack_factor
    param.pack_factor = PACK
    return param


def _check_sizes(in_features: int, output_sizes: list[int], group: int) -> None:
    if in_features % group:
        raise ModelLoadError(
            f"AWQ group_size {group} does not divide the layer's {in_features} input features; "
            "the checkpoint does not fit this model config"
        )
    if any(size % PACK for size in output_sizes):
        raise ModelLoadError(
            f"AWQ packs 8 output columns per int32, but this layer's outputs {output_sizes} are not all multiples of 8"
        )
