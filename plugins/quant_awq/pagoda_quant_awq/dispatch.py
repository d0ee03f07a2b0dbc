"""Which AWQ kernel computes a product of a given shape, and the call itself.

Two weight layouts (docs/quant_awq.md). On NVIDIA GPUs (sm_80+, fp16/bf16 models, N a multiple
of 64, pagoda-platform-cuda's kernels built) every layer is repacked at load into the *tiles* layout (:mod:`pagoda_quant_awq.tiles`) and runs ``tiles`` (the tensor-core kernel, csrc
``awq_tiles_gemm``) or ``tiles_dense`` (dequantize to W, then the dense matmul), by
:data:`TILES_TABLE`. Otherwise the checkpoint's layout stays and runs ``cuda`` (the CUDA-core GEMV,
few tokens), ``triton`` (dequantize tiles into ``tl.dot``), ``dense`` (dequantize W whole, then the
dense matmul) or ``reference`` (torch, CPU), by :data:`TABLE`. Both tables are measured by
``python -m benchmarks.kernel_bench awq``, which calls each kernel by name (the ``kernel`` argument).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch

from pagoda_quant_awq.reference import awq_linear_reference

TILES_KERNELS = ("tiles", "tiles_dense")
CUDA_MAX_TOKENS = 8  # the GEMV kernel is compiled for 1..8 tokens
# (largest token count, kernel), first match wins. H100 (benchmarks/results/h100_awq): the CUDA GEMV wins only at M = 1, Triton up to
# 16-64 tokens, the dequantize + dense matmul beyond (decoder-layer totals)
TABLE: tuple[tuple[int, str], ...] = ((1, "cuda"), (32, "triton"), (1 << 62, "dense"))
# The same for layers in the tiles layout (the default on NVIDIA GPUs): the tensor-core kernel up to
# 64 tokens (H100: 1.56-1.77x bf16 per decoder layer at 1-16 tokens, and still ahead
# of dequantize + cuBLAS at 64), dequantize + cuBLAS above.
TILES_TABLE: tuple[tuple[int, str], ...] = ((64, "tiles"), (1 << 62, "tiles_dense"))


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


def tiles_reason(device: torch.device, dtype: torch.dtype, k: int, n: int, group_size: int) -> str | None:
    """``None`` if a ``[k, n]`` layer on ``device`` is repacked into the tiles layout, else why not."""
    from pagoda_quant_awq.tiles import tiles_fit

    if device.type != "cuda":
        return "the tiles kernels are for NVIDIA GPUs"  # (ROCm builds leave them out: tiles_extension is None)
    if dtype not in (torch.float16, torch.bfloat16):
        return f"the tiles kernels compute in fp16/bf16, not {dtype}"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "the tiles kernels need compute capability 8.0 (mma.sync m16n8k16)"
    if tiles_extension() is None:
        return "pagoda-platform-cuda's kernels (with awq_tiles_gemm) are not built here"
    return tiles_fit(k, n, group_size)


@functools.cache
def tiles_extension():
    """pagoda-platform-cuda's compiled module if it has the tiles kernels, else ``None``."""
    ext = cuda_extension()
    return ext if ext is not None and hasattr(ext, "awq_tiles_gemm") else None


def choose_tiles_kernel(m: int) -> str:
    """``tiles`` or ``tiles_dense`` for ``m`` tokens of a layer in the tiles layout."""
    return next(name for limit, name in TILES_TABLE if m <= limit)


def awq_tiles_linear(x: torch.Tensor, tiles, bias: torch.Tensor | None = None, kernel: str | None = None,
                     split_k: int = 0) -> torch.Tensor:
    """``x`` [tokens, in] -> [tokens, out] = x @ dequant(W) (+ bias) for a layer in the tiles layout
    (:class:`pagoda_quant_awq.tiles.AwqTiles`); ``split_k`` > 0 forces the kernel's K split."""
    ext = tiles_extension()
    if ext is None:
        raise RuntimeError("the AWQ tiles kernels are unavailable: install pagoda-platform-cuda with its kernels built")
    kernel = kernel or choose_tiles_kernel(x.shape[0])
    if kernel == "tiles_dense":
        out = x @ ext.awq_tiles_dequantize(tiles.weights, tiles.scales, tiles.zeros, tiles.group_size)
    else:
        if x.stride(-1) != 1 or x.stride(0) % 8 or x.data_ptr() % 16:  # rows read 16 bytes at a time
            x = x.clone(memory_format=torch.contiguous_format)
        out = ext.awq_tiles_gemm(x, tiles.weights, tiles.scales, tiles.zeros, tiles.locks, tiles.group_size, split_k)
    return out if bias is None else out + bias


def choose_kernel(m: int, device: torch.device, dtype: torch.dtype) -> str:
    """The kernel for ``m`` tokens of a layer in the checkpoint's layout on ``device``: the table's,
    else a fallback."""
    if device.type != "cuda":
        return "reference"
    kernel = next(name for limit, name in TABLE if m <= limit)
    if kernel == "cuda" and not _gemv_applies(m, dtype):
        kernel = "triton"
    return kernel


def _gemv_applies(m: int, dtype: torch.dtype) -> bool:
    """The CUDA GEMV takes 1..8 fp16/bf16 tokens."""
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
