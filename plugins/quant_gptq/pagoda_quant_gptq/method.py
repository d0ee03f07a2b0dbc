"""The ``gptq`` and ``wna16`` quantization methods: grouped int4/int8 weights in every linear layer.

One method class per checkpoint format (:mod:`pagoda_quant_gptq.formats`), sharing the rest:
``create_weights`` registers the checkpoint's tensors; ``process_weights_after_loading`` reads them
as integers, reorders and splits them for 4-bit kernels (:mod:`pagoda_quant_gptq.int4_form`) and
stores them in pagoda-quant-awq's layout for the device (:mod:`pagoda_quant_gptq.layout`); ``apply``
gathers the input once (act-order, padding, 8-bit halves) and runs AWQ's kernel for the batch.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

import torch
from torch import nn

from pagoda.interfaces.platform import Platform
from pagoda.interfaces.quantization import QuantizationMethod
from pagoda_quant_gptq.config import GroupedIntConfig, gptq_config, wna16_config
from pagoda_quant_gptq.formats import CheckpointFormat, CompressedTensorsFormat, GptqFormat
from pagoda_quant_gptq.int4_form import to_int4
from pagoda_quant_gptq.layout import grouped_linear, store

MIN_CAPABILITY = (7, 5)  # the Triton kernels' tensor-core dot (the tiles kernel itself needs 8.0)


class GroupedIntMethod(QuantizationMethod):
    """Integer weights with a scale (and zero point) per group of inputs, computed by AWQ's kernels."""

    read_config: ClassVar[Callable[[dict[str, Any] | None], GroupedIntConfig]]
    format_class: ClassVar[type[CheckpointFormat]]

    def __init__(self, quant_config: dict[str, Any] | None = None) -> None:
        super().__init__(quant_config)
        self.config = type(self).read_config(quant_config)
        self.format = self.format_class(self.config)

    @classmethod
    def check(cls, platform: Platform) -> str | None:
        capability = platform.compute_capability() if platform is not None else None
        if capability is not None and capability < MIN_CAPABILITY:  # CPUs run the torch path; AMD GPUs the Triton one
            name = cls.__name__.removesuffix("Method").lower()
            return (f"{name} needs compute capability >= 7.5 (the tensor-core dot of its kernels); "
                    f"{platform.describe()} is sm_{capability[0]}{capability[1]}")
        return None

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        self.format.create(layer, in_features, out_features)
        layer.int4_dtype = dtype

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        form = to_int4(self.format.read(layer))
        self.format.release(layer)
        store(layer, form, layer.int4_dtype)

    def apply(self, layer: nn.Module, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        out = grouped_linear(layer, x)
        return out if bias is None else out + bias


class GptqMethod(GroupedIntMethod):
    description = "GPTQ int4/int8 weights (act-order, sym/asym, v1/v2), on pagoda-quant-awq's kernels"
    read_config = staticmethod(gptq_config)
    format_class = GptqFormat


class Wna16Method(GroupedIntMethod):
    description = "compressed-tensors pack-quantized int4/int8 weight-only (W4A16, W8A16), on pagoda-quant-awq's kernels"
    read_config = staticmethod(wna16_config)
    format_class = CompressedTensorsFormat
