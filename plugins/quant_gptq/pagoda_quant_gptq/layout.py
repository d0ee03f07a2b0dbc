"""Where a layer's :class:`Int4Form` lives and which of pagoda-quant-awq's kernels computes it.

Two layouts, AWQ's (see docs/quant_awq.md), chosen by ``pagoda_quant_awq.dispatch.tiles_reason``:

- **tiles** (NVIDIA sm_80+, fp16/bf16, N a multiple of 64, the csrc kernels built): ``tiles_weights``,
  ``tiles_scales``, ``tiles_zeros`` and the buffer ``tiles_locks``; kernels ``tiles`` (tensor cores)
  or ``tiles_dense`` (dequantize, then the dense matmul), by AWQ's table.
- **checkpoint** (everywhere else: CPU, fp32, other GPUs): AutoAWQ's packing in ``int4_qweight``,
  ``int4_qzeros``, ``int4_scales``; kernels ``cuda`` (GEMV), ``triton``, ``dense`` or ``reference``.

Beside them the buffers ``int4_index`` (the input gather, absent when the input is read as it is),
``int4_fused_index`` (8-bit: the gather read twice, for the fused kernels) and ``int4_excess``.
Fused kernels (``tiles``, ``cuda``, ``triton``) take the gathered input (twice for 8-bit weights);
dequantizing ones (``tiles_dense``, ``dense``, ``reference``) dequantize, add the 8-bit halves into
one ``W`` and multiply the input gathered once.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda_quant_awq import dispatch
from pagoda_quant_awq.packing import dequantize, pack_int4
from pagoda_quant_awq.tiles import AwqTiles, repack_values
from pagoda_quant_gptq.int4_form import Int4Form

FUSED = ("tiles", "cuda", "triton")


def store(layer: nn.Module, form: Int4Form, dtype: torch.dtype) -> None:
    """Put ``form`` on ``layer`` in the layout its device computes (parameters and buffers)."""
    rows, n = form.q.shape
    layer.int4_group, layer.int4_halves, layer.int4_padded = form.group, form.halves, form.plan.padded
    layer.int4_rows = rows // form.halves  # K'
    if dispatch.tiles_reason(form.q.device, dtype, rows, n, form.group) is None:
        tiles = repack_values(lambda k0, k1: form.q[k0:k1], rows, form.zeros, form.scales, form.group, dtype)
        layer.tiles_weights = _frozen(tiles.weights)
        layer.tiles_scales = _frozen(tiles.scales)
        layer.tiles_zeros = _frozen(tiles.zeros)
        layer.register_buffer("tiles_locks", tiles.locks, persistent=False)
    else:  # AWQ's checkpoint packing; fp16 scales for fp16/bf16 models (as the CUDA GEMV reads them)
        scale_dtype = torch.float16 if dtype in (torch.float16, torch.bfloat16) else dtype
        layer.int4_qweight = _frozen(pack_int4(form.q))
        layer.int4_qzeros = _frozen(pack_int4(form.zeros))
        layer.int4_scales = _frozen(form.scales.to(scale_dtype))
    index = None if form.plan.identity else form.plan.order
    layer.register_buffer("int4_index", index, persistent=False)
    fused = None
    if form.halves == 2:
        once = index if index is not None else torch.arange(layer.int4_rows, device=form.q.device)
        fused = torch.cat([once, once])
    layer.register_buffer("int4_fused_index", fused, persistent=False)
    layer.register_buffer("int4_excess", form.excess, persistent=False)  # float32 (float64 for float64 models)
    if form.excess is not None and dtype == torch.float64:
        layer.int4_excess = form.excess.double()


def _frozen(data: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(data, requires_grad=False)


def tiles_of(layer: nn.Module) -> AwqTiles:
    return AwqTiles(layer.tiles_weights, layer.tiles_scales, layer.tiles_zeros, layer.tiles_locks, layer.int4_group)


def choose(layer: nn.Module, x: torch.Tensor) -> str:
    """AWQ's kernel for ``x`` [M, K] on this layer's layout."""
    if hasattr(layer, "tiles_weights"):
        return dispatch.choose_tiles_kernel(x.shape[0])
    return dispatch.choose_kernel(x.shape[0], x.device, x.dtype)


def gather(layer: nn.Module, x: torch.Tensor, fused: bool) -> torch.Tensor:
    """The layer's input as its kernels read it: [M, K'] (8-bit weights, fused kernels: [M, 2K'])."""
    index = layer.int4_fused_index if fused and layer.int4_halves == 2 else layer.int4_index
    if index is None:
        return x
    return (F.pad(x, (0, 1)) if layer.int4_padded else x).index_select(1, index)


def grouped_linear(layer: nn.Module, x: torch.Tensor, kernel: str | None = None) -> torch.Tensor:
    """``x`` [M, K] -> [M, N] = x @ W by ``kernel`` (default: AWQ's table for the layer's layout)."""
    kernel = kernel or choose(layer, x)
    fused = kernel in FUSED
    x_in = gather(layer, x, fused)
    if fused:
        out = _fused(layer, x_in, kernel)
    else:
        out = x_in @ _dequantized(layer, kernel, x.dtype)
    if layer.int4_excess is not None:  # zero points of 16: -s times each run's sum of inputs
        excess = layer.int4_excess
        sums = x_in[:, :layer.int4_rows].unflatten(1, (-1, layer.int4_group)).sum(-1, dtype=excess.dtype)
        out = (out.to(excess.dtype) - sums @ excess).to(x.dtype)  # sums [M, K'/E]
    return out


def _fused(layer: nn.Module, x_in: torch.Tensor, kernel: str) -> torch.Tensor:
    if kernel == "tiles":
        return dispatch.awq_tiles_linear(x_in, tiles_of(layer), kernel="tiles")
    return dispatch.awq_linear(x_in, layer.int4_qweight, layer.int4_qzeros, layer.int4_scales, layer.int4_group,
                               kernel=kernel)


def _dequantized(layer: nn.Module, kernel: str, dtype: torch.dtype) -> torch.Tensor:
    """W ``[K', N]`` in ``dtype``; the two halves of 8-bit weights added (in fp32) into one."""
    halves, group = layer.int4_halves, layer.int4_group
    work = dtype if halves == 1 else (torch.float64 if dtype == torch.float64 else torch.float32)
    if kernel == "tiles_dense":
        t = tiles_of(layer)
        w = dispatch.tiles_extension().awq_tiles_dequantize(t.weights, t.scales, t.zeros, group)
    elif kernel == "dense":
        from pagoda_quant_awq.triton_kernels import awq_dequantize_triton

        w = awq_dequantize_triton(layer.int4_qweight, layer.int4_qzeros, layer.int4_scales, group, work)
    else:
        w = dequantize(layer.int4_qweight, layer.int4_qzeros, layer.int4_scales, group, work)
    if halves == 1:
        return w
    return w.to(work).reshape(2, -1, w.shape[1]).sum(0).to(dtype)
