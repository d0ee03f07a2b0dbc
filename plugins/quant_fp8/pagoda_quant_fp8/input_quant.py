"""Per-token FP8 (or INT8) quantization of a linear layer's input, alone or fused into its producer.

:class:`TokenQuantizer` runs the producer's op, then a per-token quantizer (the interface's
defaults). :class:`FusedTokenQuantizer` replaces RMSNorm (with the residual add) and SiLU-and-mul
by single Triton kernels that emit the FP8 activations (:mod:`pagoda_quant_fp8.triton_fused`).
"""

from __future__ import annotations

import logging

import torch

from pagoda.interfaces.quantization import InputQuantizer, QuantizedInput
from pagoda.interfaces.ops import CustomOps
from pagoda_quant_fp8 import kernels
from pagoda_quant_fp8.formats import FP8, QuantFormat
from pagoda_quant_fp8.fp8_math import dequantize

logger = logging.getLogger("pagoda")


class TokenQuantizer(InputQuantizer):
    """Dynamic per-token scales: the producer's op, then ``per_token``."""

    def __init__(self, per_token: kernels.TokenQuantizer) -> None:
        self.per_token = per_token

    def quantize(self, x: torch.Tensor) -> QuantizedInput:
        q, scale = self.per_token(x)
        return QuantizedInput(q, scale, x.dtype)


class FusedTokenQuantizer(TokenQuantizer):
    """The producers as single kernels that write quantized rows (``fmt``) and their scales."""

    def __init__(self, per_token: kernels.TokenQuantizer, fmt: QuantFormat = FP8) -> None:
        super().__init__(per_token)
        self.fmt = fmt

    def rms_norm(self, ops: CustomOps, x: torch.Tensor, weight: torch.Tensor, eps: float) -> QuantizedInput:
        from pagoda_quant_fp8.triton_fused import rms_norm_quant

        q, scale, _ = rms_norm_quant(x, None, weight, eps, self.fmt)
        return QuantizedInput(q, scale, x.dtype)

    def fused_add_rms_norm(self, ops: CustomOps, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                           eps: float) -> tuple[QuantizedInput, torch.Tensor]:
        from pagoda_quant_fp8.triton_fused import rms_norm_quant

        q, scale, residual = rms_norm_quant(x, residual, weight, eps, self.fmt)
        return QuantizedInput(q, scale, x.dtype), residual

    def silu_and_mul(self, ops: CustomOps, x: torch.Tensor) -> QuantizedInput:
        from pagoda_quant_fp8.triton_fused import silu_mul_quant

        q, scale = silu_mul_quant(x, self.fmt)
        return QuantizedInput(q, scale, x.dtype)


def fused_or_plain(per_token: kernels.TokenQuantizer, device: str = "cuda",
                   dtype: torch.dtype = torch.bfloat16, fmt: QuantFormat = FP8) -> TokenQuantizer:
    """:class:`FusedTokenQuantizer` if its kernels build and agree with the unfused ops on a probe
    (to the rounding of ``fmt``) on ``device`` in ``dtype``; else :class:`TokenQuantizer` (a warning says why)."""
    fused, plain = FusedTokenQuantizer(per_token, fmt), TokenQuantizer(per_token)
    try:
        mismatch = _probe(fused, plain, device, dtype)
        if mismatch:
            raise RuntimeError(f"its {mismatch} differs from the unfused ops' on a probe")
    except Exception as exc:  # no Triton or device, a Triton that cannot build it, or wrong results
        logger.warning("pagoda-quant-fp8: fused norm/activation quantization is unavailable (%s); "
                       "quantizing in a separate kernel", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return plain
    return fused


def _probe(fused: TokenQuantizer, plain: TokenQuantizer, device: str, dtype: torch.dtype) -> str | None:
    g = torch.Generator().manual_seed(0)  # on the CPU, also inside a torch.device("cuda") context
    x, res = (torch.randn(3, 4096, generator=g, device="cpu").to(device, dtype) for _ in range(2))
    w = (1 + 0.1 * torch.randn(4096, generator=g, device="cpu")).to(device, dtype)
    ops = CustomOps()
    pairs = {
        "RMSNorm": (fused.rms_norm(ops, x, w, 1e-5), plain.rms_norm(ops, x, w, 1e-5)),
        "residual add + RMSNorm": (fused.fused_add_rms_norm(ops, x, res, w, 1e-5)[0],
                                   plain.fused_add_rms_norm(ops, x, res, w, 1e-5)[0]),
        "SiLU-and-mul": (fused.silu_and_mul(ops, torch.cat([x, res], 1)), plain.silu_and_mul(ops, torch.cat([x, res], 1))),
    }
    close = close_in_int8 if fused.fmt.is_int else close_in_fp8
    for name, (a, b) in pairs.items():
        if not close(a, b):
            return name
    return None


def close_in_fp8(a: QuantizedInput, b: QuantizedInput) -> bool:
    """Equal up to one FP8 rounding step: scales within 1%, values within an e4m3 ulp (12.5%)."""
    va, vb = dequantize(a.data, a.scale), dequantize(b.data, b.scale)
    return bool(torch.allclose(a.scale, b.scale, rtol=0.01, atol=0)
                and torch.allclose(va, vb, rtol=0.13, atol=float(b.scale.max()) * 2 ** -9))


def close_in_int8(a: QuantizedInput, b: QuantizedInput) -> bool:
    """Equal up to one INT8 rounding step: scales within 1%, values within one step of the row's scale."""
    va, vb = dequantize(a.data, a.scale), dequantize(b.data, b.scale)
    return bool(torch.allclose(a.scale, b.scale, rtol=0.01, atol=0)
                and ((va - vb).abs() <= b.scale * 1.01 + a.scale * 0.01).all())
