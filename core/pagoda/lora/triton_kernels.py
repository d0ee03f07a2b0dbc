"""The LoRA shrink and expand of a step's mixed-adapter rows as Triton kernels (Punica's SGMV and BGMV).

One LoRA layer adds ``(x A_s^T) B_s^T`` to each of its output slices ``s`` (q, k, v of a fused qkv
projection; gate, up; or the one slice of o/down), with ``A``/``B`` of the row's adapter slot
(:mod:`pagoda.lora.layer` keeps them: ``a [slots, S, R, K]``, ``b [slots, N, R]``, the scale folded into
``b``). Two launches per shape, over all slices at once:

1. **shrink** ``buf[s, row, :] = x[row] @ a[slot, s]^T`` (float32 ``[S, T, R]``);
2. **expand** ``y[row, off_s : off_s + n_s] += buf[s, row] @ b[slot, off_s : off_s + n_s]^T``.

Decode rows (one per request, each its own slot) run the BGMV kernels: programs over the plan's decode blocks
(up to 16 rows of one slot, gathered; :mod:`pagoda.lora.plan`) and slices, K splits or output blocks, each one
tile product, so that rows sharing an adapter read its matrices once per block, not once per row; rows of
slot ``-1`` are in no block and left as they are. Prefill segments (a request's
run of rows, one slot) run the SGMV kernels: programs over row blocks of a segment, tile products
(``tl.dot``). Ranks below the slots' ``R`` are zero-padded in the slots, so every adapter computes at
``R`` with exact results.

Plain Triton source (CUDA and ROCm alike), imported only where a kernel runs; under
``TRITON_INTERPRET=1`` it runs on CPU tensors (the tests compare it with a float64 reference).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from pagoda.lora.plan import DECODE_BLOCK, LoRAPlan
from pagoda.triton_jit import dot_upcast
from pagoda.triton_support import interpreting


class Tiles(NamedTuple):
    block_m: int  # rows per SGMV program
    block_n: int  # output features per expand program
    block_k: int  # input features per SGMV shrink loop step
    split_k: int  # input features per BGMV shrink program (at most MAX_SPLITS of them)
    decode_k: int  # input features per BGMV shrink loop step


def tiles(max_segment_len: int) -> Tiles:
    if interpreting():
        return Tiles(16, 32, 32, 32, 32)  # small tiles: the interpreter runs every lane on the CPU
    # decode: 512 x 128 ran the Llama-8B layer's adds in 0.77-0.91x the time of 256 x 64 at 1-256 rows (H100)
    return Tiles(16 if max_segment_len <= 16 else 64, 128, 64, 512, 128)


@triton.jit
def _shrink_tile(acc, x_ptr, a_ptr, slot, s, rows, row_mask, offs_r, r_ok, k_start, k_end, stride_xm, stride_al,
                 stride_as, stride_ar, UPCAST: tl.constexpr, BLOCK_K: tl.constexpr):
    """``acc`` [BM, BR] + x[rows, k_start:k_end] @ a[slot, s, :, k_start:k_end]^T, rows outside ``row_mask``
    read as zero."""
    a_base = a_ptr + tl.cast(slot, tl.int64) * stride_al + s * stride_as
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        k_ok = offs_k < k_end
        xt = tl.load(x_ptr + rows[:, None] * stride_xm + offs_k[None, :], mask=row_mask[:, None] & k_ok[None, :],
                     other=0.0)  # [BM, BK]
        at = tl.load(a_base + offs_r[None, :] * stride_ar + offs_k[:, None], mask=k_ok[:, None] & r_ok[None, :],
                     other=0.0)  # [BK, BR]
        if UPCAST:
            xt, at = xt.to(tl.float32), at.to(tl.float32)
        acc += tl.dot(xt, at, input_precision="ieee")
    return acc


@triton.jit
def _expand_tile(t, b_ptr, slot, n_off, offs_n, n_ok, offs_r, r_ok, stride_bl, stride_bn, UPCAST: tl.constexpr):
    """``t`` [BM, BR] (float32) @ b[slot, n_off + offs_n]^T: [BM, BN] float32."""
    w = tl.load(b_ptr + tl.cast(slot, tl.int64) * stride_bl + (n_off + offs_n)[None, :] * stride_bn + offs_r[:, None],
                mask=r_ok[:, None] & n_ok[None, :], other=0.0)  # [BR, BN]
    if UPCAST:
        return tl.dot(t, w.to(tl.float32), input_precision="ieee")
    return tl.dot(t.to(w.dtype), w, input_precision="ieee")


@triton.jit
def _add_to_y(y_ptr, acc, rows, row_ok, cols, col_ok, stride_ym):
    """y[rows, cols] += acc (float32), in y's dtype."""
    y_ptrs = y_ptr + rows[:, None] * stride_ym + cols[None, :]
    mask = row_ok[:, None] & col_ok[None, :]
    y = tl.load(y_ptrs, mask=mask, other=0.0)
    tl.store(y_ptrs, (y.to(tl.float32) + acc).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sgmv_shrink_kernel(x_ptr, a_ptr, buf_ptr, seg_ptr, K, R, stride_xm, stride_al, stride_as, stride_ar,
                        stride_bs, stride_bm, UPCAST: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """buf[s, rows] = x[rows] @ a[slot, s]^T for one row block of one segment."""
    seg, pid_m, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start, end, slot = tl.load(seg_ptr + seg * 3), tl.load(seg_ptr + seg * 3 + 1), tl.load(seg_ptr + seg * 3 + 2)
    first = start + pid_m * BLOCK_M
    if first >= end:
        return
    rows = (first + tl.arange(0, BLOCK_M)).to(tl.int64)  # [BM]
    row_ok = rows < end
    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < R
    acc = _shrink_tile(tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32), x_ptr, a_ptr, slot, s, rows, row_ok, offs_r,
                       r_ok, 0, K, stride_xm, stride_al, stride_as, stride_ar, UPCAST, BLOCK_K)
    tl.store(buf_ptr + s * stride_bs + rows[:, None] * stride_bm + offs_r[None, :], acc,
             mask=row_ok[:, None] & r_ok[None, :])


@triton.jit
def _sgmv_expand_kernel(buf_ptr, b_ptr, y_ptr, seg_ptr, slice_ptr, R, n_blocks, stride_bs, stride_bm, stride_bl,
                        stride_bn, stride_ym, UPCAST: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """y[rows, slice s block] += buf[s, rows] @ b[slot, slice s block]^T for one row block of one segment."""
    seg, pid_m, pid = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    s, pid_n = pid // n_blocks, pid % n_blocks
    n_off, n_size = tl.load(slice_ptr + s * 2), tl.load(slice_ptr + s * 2 + 1)
    start, end, slot = tl.load(seg_ptr + seg * 3), tl.load(seg_ptr + seg * 3 + 1), tl.load(seg_ptr + seg * 3 + 2)
    first = start + pid_m * BLOCK_M
    if first >= end or pid_n * BLOCK_N >= n_size:
        return
    rows = (first + tl.arange(0, BLOCK_M)).to(tl.int64)
    row_ok = rows < end
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < n_size
    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < R
    t = tl.load(buf_ptr + s * stride_bs + rows[:, None] * stride_bm + offs_r[None, :],
                mask=row_ok[:, None] & r_ok[None, :], other=0.0)  # [BM, BR] float32
    acc = _expand_tile(t, b_ptr, slot, n_off, offs_n, n_ok, offs_r, r_ok, stride_bl, stride_bn, UPCAST)
    _add_to_y(y_ptr, acc, rows, row_ok, n_off + offs_n, n_ok, stride_ym)


@triton.jit
def _decode_block(block_slot_ptr, block_row_ptr, BLOCK_M: tl.constexpr):
    """A decode block's slot (-1: unused) and rows (-1 entries: none; they read row 0, masked)."""
    pid_m = tl.program_id(0)
    rows = tl.load(block_row_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    row_ok = rows >= 0
    return tl.load(block_slot_ptr + pid_m), tl.where(row_ok, rows, 0).to(tl.int64), row_ok


@triton.jit
def _decode_out_block(block_slot_ptr, block_row_ptr, slice_ptr, n_blocks, R, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """An output program's decode block (slot, rows), slice ``s`` (column offset) and columns of it, the rank
    lanes, and whether it has no work (an unused block, or columns past the slice)."""
    pid = tl.program_id(1)
    s, pid_n = pid // n_blocks, pid % n_blocks
    slot, rows, row_ok = _decode_block(block_slot_ptr, block_row_ptr, BLOCK_M)
    n_off, n_size = tl.load(slice_ptr + s * 2), tl.load(slice_ptr + s * 2 + 1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    return (s, slot, rows, row_ok, n_off, offs_n, offs_n < n_size, offs_r, offs_r < R,
            (slot < 0) | (pid_n * BLOCK_N >= n_size))


@triton.jit
def _bgmv_shrink_kernel(x_ptr, a_ptr, buf_ptr, block_slot_ptr, block_row_ptr, K, R, k_per_split, stride_xm,
                        stride_al, stride_as, stride_ar, stride_bp, stride_bs, stride_bm,
                        UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_R: tl.constexpr,
                        BLOCK_K: tl.constexpr):
    """buf[split, s, rows] = x[rows, split's K] @ a[slot, s, :, split's K]^T for one decode block (rows of
    one slot). Partial sums over K splits, added by the expand."""
    s, split = tl.program_id(1), tl.program_id(2)
    slot, rows, row_ok = _decode_block(block_slot_ptr, block_row_ptr, BLOCK_M)
    if slot < 0:
        return
    offs_r = tl.arange(0, BLOCK_R)
    r_ok = offs_r < R
    k_start = split * k_per_split
    acc = _shrink_tile(tl.zeros((BLOCK_M, BLOCK_R), dtype=tl.float32), x_ptr, a_ptr, slot, s, rows, row_ok, offs_r,
                       r_ok, k_start, tl.minimum(K, k_start + k_per_split), stride_xm, stride_al, stride_as,
                       stride_ar, UPCAST, BLOCK_K)
    tl.store(buf_ptr + split * stride_bp + s * stride_bs + rows[:, None] * stride_bm + offs_r[None, :], acc,
             mask=row_ok[:, None] & r_ok[None, :])


@triton.jit
def _bgmv_expand_kernel(buf_ptr, b_ptr, y_ptr, block_slot_ptr, block_row_ptr, slice_ptr, R, n_blocks, num_splits,
                        stride_bp, stride_bs, stride_bm, stride_bl, stride_bn, stride_ym,
                        UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        BLOCK_R: tl.constexpr, SPLITS: tl.constexpr):
    """y[rows, slice s block] += (sum of buf[:, s, rows]) @ b[slot, slice s block]^T for one decode block
    (the K splits' partial sums read at once, ``SPLITS`` >= their number)."""
    s, slot, rows, row_ok, n_off, offs_n, n_ok, offs_r, r_ok, idle = _decode_out_block(
        block_slot_ptr, block_row_ptr, slice_ptr, n_blocks, R, BLOCK_M, BLOCK_N, BLOCK_R)
    if idle:
        return
    offs_p = tl.arange(0, SPLITS)
    parts = tl.load(buf_ptr + offs_p[:, None, None] * stride_bp + s * stride_bs + rows[None, :, None] * stride_bm
                    + offs_r[None, None, :],
                    mask=(offs_p < num_splits)[:, None, None] & row_ok[None, :, None] & r_ok[None, None, :],
                    other=0.0)  # [P, BM, BR]
    acc = _expand_tile(tl.sum(parts, axis=0), b_ptr, slot, n_off, offs_n, n_ok, offs_r, r_ok, stride_bl, stride_bn,
                       UPCAST)
    _add_to_y(y_ptr, acc, rows, row_ok, n_off + offs_n, n_ok, stride_ym)


MAX_SPLITS = 16


def _bgmv(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slices: torch.Tensor, plan: LoRAPlan,
          decodes: int, blocks: int, max_slice: int, t: Tiles, block_r: int, opts: dict) -> None:
    """The decode blocks' shrink (split over K into partial sums) and expand (summing them). (One launch doing
    both, each output block recomputing its slice's shrink, took 1.9-2.4x the time of the two at 1-256 rows on an
    H100: it reads ``a`` once per output block.)"""
    k, num_slices, rank = x.shape[1], a.shape[1], a.shape[2]
    splits = min(MAX_SPLITS, triton.cdiv(k, t.split_k))
    k_per_split = triton.cdiv(triton.cdiv(k, splits), t.decode_k) * t.decode_k
    splits = triton.cdiv(k, k_per_split)
    buf = torch.empty(splits, num_slices, decodes, rank, dtype=torch.float32, device=x.device)  # [P, S, D, R]
    _bgmv_shrink_kernel[(blocks, num_slices, splits)](
        x, a, buf, plan.block_slots, plan.block_rows, k, rank, k_per_split, x.stride(0), a.stride(0), a.stride(1),
        a.stride(2), buf.stride(0), buf.stride(1), buf.stride(2), **opts,
        BLOCK_M=DECODE_BLOCK, BLOCK_R=block_r, BLOCK_K=t.decode_k)
    n_blocks = triton.cdiv(max_slice, t.block_n)
    _bgmv_expand_kernel[(blocks, num_slices * n_blocks)](
        buf, b, y, plan.block_slots, plan.block_rows, slices, rank, n_blocks, splits, buf.stride(0), buf.stride(1),
        buf.stride(2), b.stride(0), b.stride(1), y.stride(0), **opts, BLOCK_M=DECODE_BLOCK,
        BLOCK_N=t.block_n, BLOCK_R=block_r, SPLITS=triton.next_power_of_2(splits))


def add_lora_triton(y: torch.Tensor, x: torch.Tensor, a: torch.Tensor, b: torch.Tensor, slices: torch.Tensor,
                    max_slice: int, plan: LoRAPlan, t: Tiles | None = None) -> torch.Tensor:
    """``y`` [T, N] += the LoRA products of ``x`` [T, K] for the plan's rows (in place; returns ``y``).

    ``a`` [slots, S, R, K], ``b`` [slots, N, R] (last dims contiguous), ``slices`` [S, 2] int32 (offset,
    size) of each slice in ``y``'s columns, ``max_slice`` the largest size; ``t`` the tiles (default:
    :func:`tiles`; the kernel benchmark sweeps others).

    The kernels launch plainly, not as programmatic dependents: resident early, their programs slowed the base
    layer's GEMV before them, and the batch-1 decode step with an adapter took 1.28x the base's against 1.20x
    (batch 64: 1.14x against 1.16x; H100, docs/lora.md)."""
    num_rows, num_slices, rank = x.shape[0], a.shape[1], a.shape[2]
    t = t or tiles(plan.max_segment_len)
    block_r = max(16, triton.next_power_of_2(rank))
    upcast = dot_upcast(x.dtype)
    opts = dict(UPCAST=upcast)
    strides_a = (a.stride(0), a.stride(1), a.stride(2))
    decodes = plan.num_decode_rows(num_rows)
    blocks = plan.num_decode_blocks(decodes, a.shape[0]) if decodes else 0
    if blocks:
        _bgmv(y, x, a, b, slices, plan, decodes, blocks, max_slice, t, block_r, opts)
    if plan.num_segments:
        n_blocks = triton.cdiv(max_slice, t.block_n)
        buf = torch.empty(num_slices, num_rows, rank, dtype=torch.float32, device=x.device)  # [S, T, R]
        m_blocks = triton.cdiv(plan.max_segment_len, t.block_m)
        _sgmv_shrink_kernel[(plan.num_segments, m_blocks, num_slices)](
            x, a, buf, plan.segments, x.shape[1], rank, x.stride(0), *strides_a, buf.stride(0), buf.stride(1),
            **opts, BLOCK_M=t.block_m, BLOCK_R=block_r, BLOCK_K=t.block_k)
        _sgmv_expand_kernel[(plan.num_segments, m_blocks, num_slices * n_blocks)](
            buf, b, y, plan.segments, slices, rank, n_blocks, buf.stride(0), buf.stride(1), b.stride(0),
            b.stride(1), y.stride(0), **opts, BLOCK_M=t.block_m, BLOCK_N=t.block_n,
            BLOCK_R=block_r)
    return y
