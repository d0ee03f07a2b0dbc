"""Which AWQ kernel computes a product of a given shape, and the call itself.

Kernels: ``cuda`` (the GEMV of pagoda-platform-cuda's csrc, CUDA cores, few tokens), ``triton``
(dequantize tiles into ``tl.dot``), ``dense`` (dequantize W whole, then the dense matmul) and
``reference`` (torch, CPU). :data:`TABLE` maps the token count to the kernel, measured on an H100
by ``benchmarks/quant_awq.py`` (see docs/quant_awq.md); ``PAGODA_AWQ_KERNEL`` forces one kernel
(``cuda`` only where it applies: 1..8 fp16/bf16 tokens).
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import torch

from pagoda_quant_awq.reference import awq_linear_reference

ENV_FORCE = "PAGODA_AWQ_KERNEL"
KERNELS = ("cuda", "triton", "dense", "reference")
CUDA_MAX_TOKENS = 8  # the GEMV kernel is compiled for 1..8 tokens
# (largest token count, kernel), first match wins. H100, 2026-11-23 (benchmarks/results/h100_2026-11-23_awq): the CUDA GEMV wins only at M = 1, Triton up to
# 16-64 tokens, the dequantize + dense matmul beyond (decoder-layer totals)
TABLE: tuple[tuple[int, str], ...] = ((1, "cuda"), (32, "triton"), (1 << 62, "dense"))


@functools.cache
def cuda_extension():
    """pagoda-platform-cuda's compiled module if it has the AWQ GEMV, else ``None``."""
    try:
        from pagoda_platform_cuda.build import ExtensionUnavailable, load_extension
    except ImportError:
        return None
    try:
        ext = load_extension()
    except ExtensionUnavailable:
        return None
    return ext if hasattr(ext, "awq_gemv") else None


def choose_kernel(m: int, device: torch.device, dtype: torch.dtype) -> str:
    """The kernel for ``m`` tokens on ``device``: the forced one, else the table's, else a fallback."""
    forced = os.environ.get(ENV_FORCE)
    if forced and forced not in KERNELS:
        raise ValueError(f"{ENV_FORCE}={forced!r}: choose one of {', '.join(KERNELS)}")
    if forced and (forced != "cuda" or _gemv_applies(m, dtype)):
        return forced
    if device.type != "cuda":
        return "reference"
    kernel = next(name for limit, name in TABLE if m <= limit)
    if kernel == "cuda" and not _gemv_applies(m, dtype):
        kernel = "triton"
    return kernel


def _gemv_applies(m: int, dtype: torch.dtype) -> bool:
    """The CUDA GEMV takes 1..8 fp16/bf16 tokens (forcing it leaves larger calls to the table)."""
    return m <= CUDA_MAX_TOKENS and dtype in (torch.float16, torch.bfloat16) and cuda_extension() is not None


def awq_linear(x: torch.Tensor, qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
               group_size: int, bias: torch.Tensor | None = None, kernel: str | None = None) -> torch.Tensor:
    """``x`` [tokens, in] -> [tokens, out] = x @ dequant(W) (+ bias), by ``kernel`` or the table's."""
    kernel = kernel or choose_kernel(x.shape[0], x.device, x.dtype)
    out = KERNEL_FUNCTIONS[kernel](x, qweight, qzeros, scales, group_size)
    return out if bias is None else out + bias


def _cuda(x, qweight, qzeros, scales, group_size):
    ext = cuda_extension()
    if ext is None:
        raise RuntimeError("the AWQ CUDA kernel is unavailable: install pagoda-platform-cuda with its kernels built")
    return ext.awq_gemv(x if x.stride(-1) == 1 else x.contiguous(), qweight, qzeros, scales, group_size)


def _triton(x, qweight, qzeros, scales, group_size):
    from pagoda_quant_awq.triton_kernels import awq_gemm_triton

    return awq_gemm_triton(x, qweight, qzeros, scales, group_size)


def _dense(x, qweight, qzeros, scales, group_size):
    from pagoda_quant_awq.triton_kernels import awq_dequantize_triton

    return x @ awq_dequantize_triton(qweight, qzeros, scales, group_size, x.dtype)


KERNEL_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "cuda": _cuda, "triton": _triton, "dense": _dense,
    "reference": lambda x, qw, qz, s, g: awq_linear_reference(x, qw, qz, s, g),
}
