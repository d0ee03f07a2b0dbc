"""The ``awq`` quantization method: AutoAWQ GEMM-format 4-bit weights in every linear layer.

Parameters (the checkpoint's names and layouts, loaded as they are, shard by shard for fused
layers: both packed tensors are packed along the output axis, 8 columns per int32):

- ``qweight`` int32 ``[in, out/8]``, ``qzeros`` int32 ``[in/group, out/8]`` (AWQ nibble order),
- ``scales`` ``[in/group, out]`` (fp16 in the checkpoint; kept fp16 for fp16/bf16 models).

``apply`` runs the kernel that :mod:`pagoda_quant_awq.dispatch` picks for the batch size: the CUDA
GEMV for a few tokens, the Triton fused kernel, or dequantize + dense matmul; on CPU the torch
reference.
"""

from __future__ import annotations

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.quantization import QuantizationMethod
from pagoda_quant_awq.config import AwqConfig
from pagoda_quant_awq.packing import PACK


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

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        from pagoda_quant_awq.dispatch import awq_linear

        return awq_linear(x, layer.qweight, layer.qzeros, layer.scales, self.config.group_size, bias)


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
