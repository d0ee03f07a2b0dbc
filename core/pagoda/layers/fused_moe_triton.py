"""The fused MoE Triton kernel: a grouped GEMM over token-sorted experts, one launch per projection.

Lives in core (imported lazily, only when a GPU op asks for it; triton stays an optional
dependency) because it is plain Triton source that compiles for CUDA and ROCm alike: both GPU
platforms' ops (:class:`pagoda.layers.csrc_ops.CsrcOps`) use this one copy. Without triton the
torch reference (:meth:`pagoda.interfaces.ops.CustomOps.fused_moe`) answers.

Steps for ``T`` tokens routed to ``top_k`` experts each (``R = T * top_k`` rows, row ``t * top_k + j``):

1. :func:`align_by_expert` (torch, on the device, no host sync): sort the rows by expert and pad
   each expert's run to a multiple of ``BLOCK_M``, so every block of ``BLOCK_M`` rows has one expert.
2. gate/up GEMM: each program multiplies the tokens of one row block by a ``BLOCK_N`` slice of its
   expert's ``w13`` -> ``[R, 2 * inter]``; then SiLU-and-mul -> ``[R, inter]``.
3. down GEMM: the same grouping on ``w2``, scaled by each row's routing weight -> ``[R, hidden]``;
   the ``top_k`` rows of each token are summed.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import triton
import triton.language as tl

from pagoda.triton_jit import dot_upcast
from pagoda.triton_support import interpreting


class TileConfig(NamedTuple):
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int


INTERPRETER_TILES = TileConfig(16, 64, 32, 4, 1)  # small tiles: the CPU interpreter runs every lane


def tile_config(rows_per_expert: float) -> TileConfig:
    """Tiles for the mean number of rows an expert gets: few rows stream weights (wide K steps), many are GEMMs."""
    if interpreting():
        return INTERPRETER_TILES
    if rows_per_expert <= 16:
        return TileConfig(16, 64, 128, 4, 4)
    if rows_per_expert <= 64:
        return TileConfig(32, 64, 64, 4, 4)
    if rows_per_expert <= 256:
        return TileConfig(64, 128, 64, 4, 3)
    return TileConfig(128, 128, 64, 8, 3)


@triton.jit
def _grouped_gemm_kernel(
    a_ptr, w_ptr, out_ptr, row_weight_ptr, sorted_rows_ptr, block_expert_ptr,
    N, K, num_rows, stride_am, stride_we, stride_wn, stride_om,
    A_ROW_DIV: tl.constexpr, MUL_ROW_WEIGHT: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """out[row, n] = sum_k a[row // A_ROW_DIV, k] * w[expert, n, k] (* row_weight[row]) for one row block."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:  # a block past the last expert's padded run
        return
    rows = tl.load(sorted_rows_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))  # [BM]; padding = num_rows
    row_ok = rows < num_rows
    a_rows = rows // A_ROW_DIV  # the token a row reads (gate/up) or the row itself (down)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
    n_ok = offs_n < N
    w_base = w_ptr + expert.to(tl.int64) * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)  # [BK]
        k_ok = offs_k < K
        a = tl.load(a_ptr + a_rows[:, None] * stride_am + offs_k[None, :], mask=row_ok[:, None] & k_ok[None, :],
                    other=0.0)  # [BM, BK]
        w = tl.load(w_base + offs_n[None, :] * stride_wn + offs_k[:, None], mask=k_ok[:, None] & n_ok[None, :],
                    other=0.0)  # [BK, BN]
        if UPCAST:
            acc += tl.dot(a.to(tl.float32), w.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(a, w, input_precision="ieee")
    if MUL_ROW_WEIGHT:
        acc *= tl.load(row_weight_ptr + rows, mask=row_ok, other=0.0)[:, None]
    out = out_ptr + rows[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & n_ok[None, :])


def align_by_expert(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[T, top_k]`` expert ids -> (sorted_rows [capacity], block_expert [capacity // block_m]).

    ``sorted_rows`` lists the rows (``t * top_k + j``) expert by expert, each expert's run padded
    with the sentinel ``R`` to a multiple of ``block_m``; ``block_expert`` is each block's expert,
    ``-1`` for blocks past the end. ``capacity`` is an upper bound known without a host sync.
    """
    flat = topk_ids.flatten().long()  # [R]
    num_rows = flat.numel()
    counts = torch.zeros(num_experts, dtype=torch.long, device=flat.device).scatter_add_(
        0, flat, torch.ones_like(flat))  # [E]; bincount would sync with the host (no CUDA graph)
    padded = (counts + block_m - 1) // block_m * block_m
    run_end = torch.cumsum(padded, 0)  # [E]
    order = torch.argsort(flat, stable=True)  # rows grouped by expert
    expert_of = flat[order]
    rank_in_run = torch.arange(num_rows, device=flat.device) - (torch.cumsum(counts, 0) - counts)[expert_of]
    capacity = -(-(num_rows + min(num_experts, num_rows) * (block_m - 1)) // block_m) * block_m
    sorted_rows = torch.full((capacity,), num_rows, dtype=torch.int32, device=flat.device)
    sorted_rows[(run_end - padded)[expert_of] + rank_in_run] = order.to(torch.int32)
    block_start = torch.arange(0, capacity, block_m, device=flat.device)
    block_expert = torch.searchsorted(run_end, block_start, right=True)  # [blocks]
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_rows, block_expert


def _grouped_gemm(
    a: torch.Tensor, w: torch.Tensor, sorted_rows: torch.Tensor, block_expert: torch.Tensor, num_rows: int,
    a_row_div: int, row_weight: torch.Tensor | None, tiles: TileConfig,
) -> torch.Tensor:
    """``[num_rows, w.shape[1]]``: each row times its expert's ``w`` ([E, N, K]), one launch."""
    n, k = w.shape[1], w.shape[2]
    out = torch.empty(num_rows, n, dtype=a.dtype, device=a.device)
    upcast = dot_upcast(a.dtype)
    grid = (block_expert.numel(), triton.cdiv(n, tiles.block_n))
    _grouped_gemm_kernel[grid](
        a, w, out, row_weight if row_weight is not None else out, sorted_rows, block_expert,
        n, k, num_rows, a.stride(0), w.stride(0), w.stride(1), out.stride(0),
        A_ROW_DIV=a_row_div, MUL_ROW_WEIGHT=row_weight is not None, UPCAST=upcast,
        BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )
    return out


def fused_moe_triton(
    x: torch.Tensor,  # [T, hidden]
    w13: torch.Tensor,  # [E, 2 * inter, hidden]
    w2: torch.Tensor,  # [E, hidden, inter]
    topk_weights: torch.Tensor,  # [T, top_k]
    topk_ids: torch.Tensor,  # [T, top_k]
    silu_and_mul: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """Same result as :meth:`pagoda.interfaces.ops.CustomOps.fused_moe`, in two grouped-GEMM launches."""
    tokens, top_k = topk_ids.shape
    num_rows = tokens * top_k
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    tiles = tile_config(num_rows / w13.shape[0])
    sorted_rows, block_expert = align_by_expert(topk_ids, w13.shape[0], tiles.block_m)
    gate_up = _grouped_gemm(x, w13, sorted_rows, block_expert, num_rows, top_k, None, tiles)  # [R, 2 * inter]
    hidden = silu_and_mul(gate_up).contiguous()  # [R, inter]
    row_weight = topk_weights.reshape(-1).float().contiguous()  # [R]
    down = _grouped_gemm(hidden, w2, sorted_rows, block_expert, num_rows, 1, row_weight, tiles)  # [R, hidden]
    return down.view(tokens, top_k, -1).sum(dim=1, dtype=torch.float32).to(x.dtype)
