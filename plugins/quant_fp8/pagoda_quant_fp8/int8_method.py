"""The ``int8`` quantization method: W8A8-INT8, symmetric int8 weights (one scale per output channel) and
int8 activations (dynamic, one scale per token), multiplied on int8 tensor cores into int32.

It reads compressed-tensors ``int-quantized`` checkpoints (llm-compressor's W8A8 INT8 output) and
quantizes float checkpoints at load (``--quantization int8``). After loading every linear layer holds
``weight`` [N, K] int8, ``weight_scale`` [1, N] float32 (per-tensor checkpoint scales are expanded per
channel: exact) and, for static activation scales, ``input_scale`` (0-dim). The layout and loading are
the FP8 method's (:class:`pagoda_quant_fp8.method.W8A8Method`); the format and the matmul differ.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.interfaces.platform import Platform
from pagoda_quant_fp8 import kernels
from pagoda_quant_fp8.formats import INT8
from pagoda_quant_fp8.input_quant import TokenQuantizer, fused_or_plain
from pagoda_quant_fp8.method import W8A8Method
from pagoda_quant_fp8.scheme import parse_int8_scheme

Backend = Literal["auto", "triton", "torch", "reference"]
INT_MM_MIN_ROWS = 17  # cuBLAS's int8 GEMM behind torch._int_mm takes more than 16 rows


def int_mm(x_q: torch.Tensor, x_scale: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor,
           out_dtype: torch.dtype) -> torch.Tensor:
    """``torch._int_mm`` (cuBLASLt int8 on CUDA, oneDNN on CPU) into int32, then the scales in float32."""
    m = x_q.shape[0]
    if x_q.is_cuda and m < INT_MM_MIN_ROWS:
        x_q = F.pad(x_q, (0, 0, 0, INT_MM_MIN_ROWS - m))
    acc = torch._int_mm(x_q, w.t())[:m]  # [M, N] int32
    return (acc.float() * x_scale * w_scale).to(out_dtype)


class Int8Method(W8A8Method):
    """W8A8-INT8 linear layers.

    ``backend``: ``auto`` (the engine's: ``triton`` for layers on a CUDA device, ``torch`` elsewhere,
    decided at the first loaded layer), ``triton`` (one Triton kernel: int8 dots, scales in the epilogue; the
    per-token quantization fused into the RMSNorm and SiLU-and-mul that produce the input when its probe
    passes), ``torch`` (``torch._int_mm`` and torch ops; CPUs) or ``reference`` (float32 dequantize-and-
    multiply; tests).
    """

    description = "INT8 W8A8 weights and activations (int8 tensor cores via Triton or torch._int_mm; CPUs too)"
    fmt = INT8

    def __init__(self, quant_config: dict[str, Any] | None = None, backend: Backend = "auto") -> None:
        super().__init__(quant_config, parse_int8_scheme(quant_config))
        self.backend: Backend = backend
        self.ready = False  # the kernels are chosen at the first loaded layer, on its device

    @classmethod
    def check(cls, platform: Platform) -> str | None:
        if platform is None or platform.device_type not in ("cuda", "cpu"):
            where = platform.describe() if platform is not None else "this platform"
            return f"int8 runs on NVIDIA GPUs (compute capability >= 8.0), AMD GPUs and CPUs, not on {where}"
        reason = platform.supports_dtype(torch.int8)  # the GPU's int8 matmuls (NVIDIA: sm_80+)
        return None if reason is None else f"int8 cannot run on {platform.describe()}: {reason}"

    def process_weights_after_loading(self, layer: nn.Module) -> None:
        if not self.ready:
            self._use(layer.weight.is_cuda)
        super().process_weights_after_loading(layer)

    def _use(self, on_gpu: bool) -> None:
        """The matmul and the activation quantizers of ``backend`` (``auto``: ``triton`` on a GPU, else ``torch``)."""
        if self.backend == "auto":
            self.backend = "triton" if on_gpu else "torch"
        if self.backend == "reference":
            self.matmul = kernels.reference_mm
        elif self.backend == "torch":
            self.matmul = int_mm
        else:
            from pagoda_quant_fp8.triton_int8 import int8_scaled_mm

            self.matmul = int8_scaled_mm
        if self.backend == "triton" and on_gpu:  # fused Triton quantizers, each kept if its probe passes
            from pagoda_quant_fp8.triton_quant import fused_per_token_quantizer

            self.per_token = fused_per_token_quantizer(INT8) or INT8.per_row
        self.token_quantizer = TokenQuantizer(self.per_token)
        if self.backend == "triton" and on_gpu and self.scheme.activation == "token":
            self.token_quantizer = fused_or_plain(self.per_token, fmt=INT8)
        self.ready = True
