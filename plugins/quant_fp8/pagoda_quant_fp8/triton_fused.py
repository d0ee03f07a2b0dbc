"""RMSNorm (with the residual add) and SiLU-and-mul fused with per-token FP8 or INT8 quantization (Triton).

One program per token row holds the whole row in registers: it computes the producer's output
exactly as the unfused ops round it (to the model dtype), then the row's amax, the scale and the
FP8 values, and writes only those (plus the updated residual). Unfused, the same data passes
through memory three more times: the producer writes it in the model dtype, the quantizer reads
it twice. Same quantization math as :mod:`pagoda_quant_fp8.triton_quant` (INT8: ``scale = amax / 127``,
values rounded to the nearest integer, ties to even, as ``torch.round``). Imported only where
Triton is (``input_quant`` imports it on first use); the kernels are decorated at import, so tests
import it under the interpreter (``tests/conftest.py``).
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl

from pagoda.triton_support import interpreting
from pagoda_quant_fp8.fp8_math import MIN_SCALE
from pagoda_quant_fp8.formats import FP8, QuantFormat


ROUND_MAGIC = tl.constexpr(12582912.0)  # 1.5 * 2**23: (v + it) - it rounds a float32 |v| < 2**22 to an integer, ties to even


@triton.jit
def _store_quantized(y, q_ptr, s_ptr, row, offs, mask, FMAX: tl.constexpr, SMIN: tl.constexpr,
                     INT: tl.constexpr = False):
    """``y`` fp32 (zero where masked) -> fp8 (or int8: ``INT``) row at ``q_ptr`` and its scale at ``s_ptr + row``."""
    amax = tl.max(tl.abs(y), axis=0)
    scale = tl.maximum(tl.math.div_rn(amax, amax * 0 + FMAX), SMIN)  # IEEE division, as torch's
    tl.store(s_ptr + row, scale)
    inv_scale = tl.math.div_rn(scale * 0 + 1.0, scale)  # one IEEE division per row, then products: x / scale
    q = tl.minimum(tl.maximum(y * inv_scale, -FMAX), FMAX)  # can differ in the last float32 bit, rarely an FP8 step
    if INT:
        q = ((q + ROUND_MAGIC) - ROUND_MAGIC).to(q_ptr.dtype.element_ty)  # an integer: the cast is exact
    elif q_ptr.dtype.element_ty != tl.float32:
        q = q.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
    tl.store(q_ptr + offs, q, mask=mask)


@triton.jit
def _rms_norm_quant(x_ptr, res_ptr, res_out_ptr, w_ptr, q_ptr, s_ptr, K, stride_x, stride_r, stride_q, eps,
                    HAS_RESIDUAL: tl.constexpr, FMAX: tl.constexpr, SMIN: tl.constexpr, BLOCK: tl.constexpr,
                    INT: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < K
    dtype = x_ptr.dtype.element_ty
    x = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:  # x + residual, rounded to the model dtype like the unfused add
        r = tl.load(res_ptr + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(dtype)
        tl.store(res_out_ptr + row * K + offs, x, mask=mask)
    xf = x.to(tl.float32)
    inv_rms = tl.math.rsqrt(tl.sum(xf * xf, axis=0) / K + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = ((xf * inv_rms).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    _store_quantized(y, q_ptr + row * stride_q, s_ptr, row, offs, mask, FMAX, SMIN, INT)


@triton.jit
def _silu_mul_quant(x_ptr, q_ptr, s_ptr, D, stride_x, stride_q,
                    FMAX: tl.constexpr, SMIN: tl.constexpr, BLOCK: tl.constexpr, INT: tl.constexpr = False):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < D
    dtype = x_ptr.dtype.element_ty
    g = tl.load(x_ptr + row * stride_x + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + D + offs, mask=mask, other=0.0).to(tl.float32)
    silu = (g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32)  # rounded like F.silu's output
    y = (silu * u).to(dtype).to(tl.float32)
    _store_quantized(y, q_ptr + row * stride_q, s_ptr, row, offs, mask, FMAX, SMIN, INT)


def _launch_shape(width: int) -> dict:
    """The row in one block; 8 warps for 4096 columns, 16 from 16384 (measured on an H100:
    benchmarks/results/h100_fp8/, its README names the run)."""
    block = 1 << max(0, (width - 1).bit_length())
    return {"BLOCK": block, "num_warps": min(16, max(8, block // 1024))}


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _outputs(m: int, k: int, device: torch.device, fmt: QuantFormat) -> tuple[torch.Tensor, torch.Tensor]:
    """The quantized rows and their scales. Triton 3.9's interpreter (CPU tests) rounds float32 to e4m3
    wrongly (127.1 -> 64, ties away from even), so there the kernel writes the float32 values of an FP8
    row and torch rounds them (INT8 rows are integers already: their cast is exact)."""
    dtype = torch.float32 if interpreting() and not fmt.is_int else fmt.dtype
    return (torch.empty((m, k), dtype=dtype, device=device),
            torch.empty((m, 1), dtype=torch.float32, device=device))


def _cast(q: torch.Tensor, fmt: QuantFormat) -> torch.Tensor:
    return q if q.dtype == fmt.dtype else q.to(fmt.dtype)


def rms_norm_quant(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float,
                   fmt: QuantFormat = FP8) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``x`` [M, K] (+ ``residual``) -> (``fmt`` [M, K], scale [M, 1], x + residual or None)."""
    x, residual = _rows(x), _rows(residual) if residual is not None else None
    m, k = x.shape
    q, scale = _outputs(m, k, x.device, fmt)
    res_out = torch.empty_like(x) if residual is not None else None
    if m:
        res = residual if residual is not None else x
        _rms_norm_quant[(m,)](x, res, res_out if res_out is not None else x, weight, q, scale, k, x.stride(0),
                              res.stride(0), q.stride(0), eps, HAS_RESIDUAL=residual is not None,
                              FMAX=fmt.qmax, SMIN=MIN_SCALE, INT=fmt.is_int, **_launch_shape(k))
    return _cast(q, fmt), scale, res_out


def silu_mul_quant(x: torch.Tensor, fmt: QuantFormat = FP8) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, 2D] (gate | up) -> (``fmt`` silu(gate) * up [M, D], scale [M, 1])."""
    x = _rows(x)
    m, d = x.shape[0], x.shape[1] // 2
    q, scale = _outputs(m, d, x.device, fmt)
    if m:
        _silu_mul_quant[(m,)](x, q, scale, d, x.stride(0), q.stride(0), FMAX=fmt.qmax, SMIN=MIN_SCALE, INT=fmt.is_int,
                              **_launch_shape(d))
    return _cast(q, fmt), scale
