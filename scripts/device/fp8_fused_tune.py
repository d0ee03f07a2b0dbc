"""Launch shapes of the fused FP8 producer kernels (pagoda_quant_fp8.triton_fused), measured.

    python3 scripts/device/fp8_fused_tune.py > $OUT/fused_tune.txt

For SiLU-and-mul (Llama-3.1-8B's 14336 columns) and RMSNorm (4096), at M = 1, 256, 8192: each
``num_warps`` of the one-row-in-registers kernel, and a chunked variant (two passes over the row,
the second from L2), in microseconds (CUDA-graph replays) and GB/s of DRAM traffic (read once,
written once).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from pagoda_quant_fp8 import triton_fused as tf
from pagoda_quant_fp8.fp8_math import FP8_DTYPE, FP8_MAX, MIN_SCALE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from quant_fp8 import graph_us  # noqa: E402  (CUDA-graph replay timing, shared with the GEMM benchmark)


@triton.jit
def _silu_chunked(x_ptr, q_ptr, s_ptr, D, stride_x, stride_q, FMAX: tl.constexpr, SMIN: tl.constexpr,
                  CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    dtype = x_ptr.dtype.element_ty
    amax = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, D, CHUNK):
        mask = start + offs < D
        g = tl.load(x_ptr + row * stride_x + start + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(x_ptr + row * stride_x + D + start + offs, mask=mask, other=0.0).to(tl.float32)
        y = ((g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32) * u).to(dtype).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(y))
    row_max = tl.max(amax, axis=0)
    scale = tl.maximum(tl.math.div_rn(row_max, row_max * 0 + FMAX), SMIN)
    tl.store(s_ptr + row, scale)
    for start in range(0, D, CHUNK):
        mask = start + offs < D
        g = tl.load(x_ptr + row * stride_x + start + offs, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(x_ptr + row * stride_x + D + start + offs, mask=mask, other=0.0).to(tl.float32)
        y = ((g / (1.0 + tl.exp(-g))).to(dtype).to(tl.float32) * u).to(dtype).to(tl.float32)
        q = tl.minimum(tl.maximum(y * (1.0 / scale), -FMAX), FMAX)
        tl.store(q_ptr + row * stride_q + start + offs, q.to(q_ptr.dtype.element_ty, fp_downcast_rounding="rtne"),
                 mask=mask)


def report(name: str, m: int, us: float, traffic: int) -> None:
    print(f"{name:28s} M={m:5d} {us:8.1f} us {traffic / us / 1e3:7.0f} GB/s", flush=True)


def silu(m: int, d: int = 14336) -> None:
    x = torch.randn(m, 2 * d, device="cuda", dtype=torch.bfloat16)
    q = torch.empty(m, d, device="cuda", dtype=FP8_DTYPE)
    s = torch.empty(m, 1, device="cuda", dtype=torch.float32)
    traffic = x.numel() * 2 + q.numel() + m * 4
    block = triton.next_power_of_2(d)
    for warps in (4, 8, 16, 32):
        us = graph_us(lambda: tf._silu_mul_quant[(m,)](x, q, s, d, x.stride(0), q.stride(0), FMAX=FP8_MAX,
                                                         SMIN=MIN_SCALE, BLOCK=block, num_warps=warps))
        report(f"silu registers warps={warps}", m, us, traffic)
    for chunk, warps in ((1024, 4), (2048, 4), (2048, 8), (4096, 8)):
        us = graph_us(lambda: _silu_chunked[(m,)](x, q, s, d, x.stride(0), q.stride(0), FMAX=FP8_MAX, SMIN=MIN_SCALE,
                                                  CHUNK=chunk, num_warps=warps))
        report(f"silu chunked {chunk} warps={warps}", m, us, traffic)


def norm(m: int, k: int = 4096) -> None:
    x, r = torch.randn(2, m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    q = torch.empty(m, k, device="cuda", dtype=FP8_DTYPE)
    s = torch.empty(m, 1, device="cuda", dtype=torch.float32)
    traffic = 3 * x.numel() * 2 + q.numel()
    for warps in (4, 8, 16):
        us = graph_us(lambda: tf._rms_norm_quant[(m,)](x, r, out, w, q, s, k, x.stride(0), r.stride(0), q.stride(0),
                                                       1e-5, HAS_RESIDUAL=True, FMAX=FP8_MAX, SMIN=MIN_SCALE,
                                                       BLOCK=k, num_warps=warps))
        report(f"norm registers warps={warps}", m, us, traffic)


if __name__ == "__main__":
    print(f"default launch shapes: silu {tf._launch_shape(14336)}, norm {tf._launch_shape(4096)}")
    for m in (1, 256, 8192):
        silu(m)
        norm(m)
