"""Dynamic per-token FP8 (or INT8) quantization in one Triton kernel (one program per token row).

The torch version (:func:`pagoda_quant_fp8.fp8_math.quantize_per_row`) launches about six
kernels per linear layer (abs, amax, scale, divide, clamp, cast); in a decode step of small
batches those launches cost more than the data they touch. This kernel reads the row twice
(amax, then scale-and-cast) and writes the FP8 row and its float32 scale. Same math:
``scale = max(amax / 448, 1e-12)``, ``q = fp8(clamp(x / scale, -448, 448))``; INT8: 127 for 448 and
``q`` rounded to the nearest integer, ties to even (``torch.round``).
"""

from __future__ import annotations

import functools
import logging
from typing import Callable

import torch

from pagoda_quant_fp8.fp8_math import MIN_SCALE
from pagoda_quant_fp8.formats import FP8, QuantFormat

logger = logging.getLogger("pagoda")
BLOCK = 1024


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def per_token_quant(x_ptr, q_ptr, s_ptr, K, stride_x, stride_q,
                        FMAX: tl.constexpr, SMIN: tl.constexpr, BLOCK: tl.constexpr, INT: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        offs = tl.arange(0, BLOCK)
        amax = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, K, BLOCK):
            mask = start + offs < K
            v = tl.load(x_ptr + row * stride_x + start + offs, mask=mask, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.abs(v))
        row_max = tl.max(amax, axis=0)
        scale = tl.maximum(tl.math.div_rn(row_max, row_max * 0 + FMAX), SMIN)  # IEEE division, as torch's
        tl.store(s_ptr + row, scale)
        for start in range(0, K, BLOCK):
            mask = start + offs < K
            v = tl.load(x_ptr + row * stride_x + start + offs, mask=mask, other=0.0).to(tl.float32)
            q = tl.minimum(tl.maximum(tl.math.div_rn(v, v * 0 + scale), -FMAX), FMAX)
            if INT:
                q = (q + 12582912.0) - 12582912.0  # 1.5 * 2**23: to the nearest integer, ties to even
                q = q.to(q_ptr.dtype.element_ty)
            else:
                q = q.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne")
            tl.store(q_ptr + row * stride_q + start + offs, q, mask=mask)

    return per_token_quant


def quantize_per_token_triton(x: torch.Tensor, fmt: QuantFormat = FP8) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` [M, K] (rows contiguous) -> (``fmt`` [M, K], scale [M, 1] float32)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    m, k = x.shape
    q = torch.empty((m, k), dtype=fmt.dtype, device=x.device)
    scale = torch.empty((m, 1), dtype=torch.float32, device=x.device)
    if m:
        _kernel()[(m,)](x, q, scale, k, x.stride(0), q.stride(0), FMAX=fmt.qmax, SMIN=MIN_SCALE,
                        BLOCK=min(BLOCK, _next_pow2(k)), INT=fmt.is_int)
    return q, scale


def fused_per_token_quantizer(fmt: QuantFormat = FP8) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None:
    """The Triton quantizer if it builds and agrees with torch on a CUDA device here, else ``None``
    (the caller then uses the torch ops; a warning says why)."""
    try:
        x = torch.linspace(-300.0, 300.0, 2 * 4096, device="cuda").view(2, 4096).to(torch.bfloat16)
        q, scale = quantize_per_token_triton(x, fmt)
        q_ref, scale_ref = fmt.per_row(x)
        if not (torch.equal(q.float(), q_ref.float()) and torch.equal(scale, scale_ref)):
            raise RuntimeError(f"its {fmt.name} values differ from torch's on a probe row")
    except Exception as exc:  # no Triton or no CUDA device, a Triton that cannot build it, or wrong results
        logger.warning("pagoda-quant-fp8: the fused Triton per-token quantizer is unavailable (%s); "
                       "using torch ops", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return None
    return functools.partial(quantize_per_token_triton, fmt=fmt)


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
