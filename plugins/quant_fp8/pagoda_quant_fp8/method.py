"""The ``fp8`` quantization method: e4m3 weights, FP8 activations, a scaled matmul; and the W8A8 base it
shares with ``int8`` (:mod:`pagoda_quant_fp8.int8_method`).

After loading, every linear layer holds the same canonical state, whatever the checkpoint:

- ``weight``: [N, K] float8_e4m3fn
- ``weight_scale``: float32, 0-dim (tensor-wise) or [1, N] (row-wise: one scale per output channel)
- ``input_scale``: float32 0-dim, only for static activation scales
- ``fp8_rowwise``: whether the matmul uses row-wise scales ([M, 1] x [1, N]) or tensor-wise ones

Fused layers (qkv, gate_up) load one per-tensor scale per shard (``shard_indexed``). Equal shard
scales stay one tensor-wise scale; different ones become per-channel scales (exact: no
requantization). Static input scales of the shards, which all scale the same input, become their
maximum. Block-wise checkpoints are dequantized at load and requantized per output channel.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.quantization import InputQuantizer, QuantizationMethod, QuantizedInput
from pagoda_quant_fp8 import kernels
from pagoda_quant_fp8.input_quant import TokenQuantizer, fused_or_plain
from pagoda_quant_fp8.formats import FP8, QuantFormat
from pagoda_quant_fp8.fp8_math import FP8_DTYPE, dequantize_blocks, quantize_per_row
from pagoda_quant_fp8.scheme import Fp8Scheme, parse_scheme

Backend = Literal["cuda", "torch", "reference"]


def _param(data: torch.Tensor, **attrs: Any) -> nn.Parameter:
    param = nn.Parameter(data, requires_grad=False)
    for name, value in attrs.items():
        setattr(param, name, value)
    return param


class W8A8Method(QuantizationMethod):
    """Linear layers of 8-bit weights and activations in ``fmt`` (FP8 or INT8): parameters, loading of fused
    shards, the canonical per-layer state and ``apply``; a subclass chooses the format and the matmul."""

    fmt: ClassVar[QuantFormat]

    def __init__(self, quant_config: dict[str, Any] | None, scheme: Fp8Scheme) -> None:
        super().__init__(quant_config)
        self.scheme = scheme
        self.matmul: kernels.Matmul = kernels.reference_mm
        self.per_token: kernels.TokenQuantizer = self.fmt.per_row
        self.token_quantizer: TokenQuantizer = TokenQuantizer(self.per_token)

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        scheme, shards = self.scheme, len(layer.output_sizes)
        if scheme.weight == "online":  # a float checkpoint, quantized in process_weights_after_loading
            layer.weight = _param(torch.empty(out_features, in_features, dtype=dtype))
            return
        layer.weight = _param(torch.empty(out_features, in_features, dtype=self.fmt.dtype))
        if scheme.weight == "tensor":
            layer.weight_scale = _param(torch.ones(shards), shard_indexed=True)  # one per shard
        elif scheme.weight == "channel":
            layer.weight_scale = _param(torch.ones(out_features, 1))  # [N, 1] as compressed-tensors stores it
        else:
            rows, cols = scheme.block
            _check_blocks(layer.output_sizes, rows)
            shape = (-(-out_features // rows), -(-in_features // cols))
            setattr(layer, scheme.scale_name, _param(torch.ones(shape), pack_factor=rows, input_dim=1,
                                                     input_pack_factor=cols))
        if scheme.activation == "static":
            layer.input_scale = _param(torch.ones(shards), shard_indexed=True)

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        scheme = self.scheme
        if scheme.weight in ("online", "block"):
            w = layer.weight.data  # [N, K]
            if scheme.weight == "block":
                w = dequantize_blocks(w, getattr(layer, scheme.scale_name).data, scheme.block)
                delattr(layer, scheme.scale_name)
            q, scale = self.fmt.per_row(w)  # [N, K], [N, 1]
            layer.weight = _param(q)
            w_scale = scale.view(1, -1)
        elif scheme.weight == "channel":
            w_scale = layer.weight_scale.data.float().view(1, -1)  # [1, N]
        else:
            w_scale = _merge_shard_scales(layer.weight_scale.data, layer.output_sizes)
        if scheme.activation == "static":
            layer.input_scale = _param(layer.input_scale.data.float().max())  # the shards share one input
        rowwise = self.rowwise(w_scale)
        if rowwise:
            w_scale = w_scale.float().reshape(-1).expand(layer.out_features).reshape(1, -1).contiguous()
        layer.weight_scale = _param(w_scale.float())
        self.finish_layer(layer, rowwise)

    def rowwise(self, w_scale: torch.Tensor) -> bool:
        """Whether the matmul takes per-row scales ([M, 1] x [1, N]) rather than two 0-dim ones."""
        return True

    def finish_layer(self, layer: nn.Module, rowwise: bool) -> None:
        """After loading: record what ``apply`` needs, check what the kernels need."""

    def input_quantizer(self, layer: nn.Module) -> InputQuantizer | None:
        """Per-token scales can come from the input's producer; static and tensor-wise ones cannot."""
        return self.token_quantizer if self.scheme.activation == "token" else None

    def apply(self, layer: nn.Module, x: torch.Tensor | QuantizedInput, bias: torch.Tensor | None) -> torch.Tensor:
        """``x`` [M, K] in the model dtype (or quantized by ``input_quantizer``) -> [M, N] in the model dtype."""
        if not isinstance(x, QuantizedInput):
            x = QuantizedInput(*kernels.quantize_activations(
                x, self.scheme.activation, getattr(layer, "input_scale", None), self.rows_of(layer), self.per_token,
                self.fmt), x.dtype)
        out = self.matmul(x.data, x.scale, layer.weight, layer.weight_scale, x.dtype)
        return out if bias is None else out.add_(bias)

    def rows_of(self, layer: nn.Module) -> bool:
        """Whether ``layer``'s activation scales take the [M, 1] layout."""
        return True


class Fp8Method(W8A8Method):
    """FP8 W8A8 linear layers (see the module docstring for the layouts).

    ``backend``: ``cuda`` (the engine's: ``torch._scaled_mm`` with fast accumulation, and the
    Triton kernels that quantize activations per token, fused into the RMSNorm and SiLU-and-mul
    that produce them, when Triton is there), ``torch`` (``torch._scaled_mm`` with torch ops only;
    it also runs on CPU) or ``reference`` (float32 dequantize-and-multiply; tests).
    """

    description = "FP8 e4m3 weights and activations (torch._scaled_mm; compute capability >= 8.9)"
    fmt = FP8

    def __init__(self, quant_config: dict[str, Any] | None = None, backend: Backend = "cuda") -> None:
        super().__init__(quant_config, parse_scheme(quant_config))
        self.backend = backend
        self.matmul = kernels.reference_mm if backend == "reference" else kernels.scaled_mm
        if backend == "cuda":
            from pagoda_quant_fp8.triton_quant import fused_per_token_quantizer

            self.per_token = fused_per_token_quantizer() or quantize_per_row
            self.matmul = kernels.scaled_mm_fast_accum
        self.token_quantizer = TokenQuantizer(self.per_token)
        if backend == "cuda" and self.scheme.activation == "token":
            self.token_quantizer = fused_or_plain(self.per_token)

    @classmethod
    def check(cls, platform: Platform) -> str | None:
        device_fp8 = platform.fp8_dtype() if platform is not None else None
        where = platform.describe() if platform is not None else "this platform"
        if device_fp8 is None:
            return f"fp8 needs compute capability >= 8.9, i.e. FP8 tensor cores ({where} has none)"
        if device_fp8 != FP8_DTYPE:
            return f"fp8 computes in {FP8_DTYPE} but {where} computes FP8 as {device_fp8}"
        return None

    def rowwise(self, w_scale: torch.Tensor) -> bool:
        return w_scale.dim() > 0 or self.scheme.activation == "token"

    def finish_layer(self, layer: nn.Module, rowwise: bool) -> None:
        layer.fp8_rowwise = rowwise
        if self.backend != "reference":
            _check_alignment(layer)

    def rows_of(self, layer: nn.Module) -> bool:
        return layer.fp8_rowwise


def _merge_shard_scales(scales: torch.Tensor, output_sizes: list[int]) -> torch.Tensor:
    """Per-shard scales [shards] -> one 0-dim scale if they agree, else per-channel [1, N]."""
    scales = scales.float()
    if bool((scales == scales[0]).all()):
        return scales[0].clone()
    sizes = torch.tensor(output_sizes, device=scales.device)
    return scales.repeat_interleave(sizes).view(1, -1)


def _check_blocks(output_sizes: list[int], rows: int) -> None:
    if len(output_sizes) > 1 and any(size % rows for size in output_sizes):
        raise ModelLoadError(
            f"Block-wise FP8 weights with {rows}-row blocks cannot be split into fused shards of "
            f"{output_sizes} rows (each shard must be a whole number of blocks)."
        )


def _check_alignment(layer: nn.Module) -> None:
    n, k = layer.weight.shape
    if n % kernels.ALIGNMENT or k % kernels.ALIGNMENT:
        raise ModelLoadError(
            f"fp8 needs linear layers whose input and output features are multiples of {kernels.ALIGNMENT} "
            f"(torch._scaled_mm); this model has a [{n}, {k}] layer. Run it without --quantization fp8."
        )
