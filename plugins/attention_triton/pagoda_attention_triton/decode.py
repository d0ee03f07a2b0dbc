"""Decode attention (one query token per sequence), optionally split over the KV (flash-decoding).

Grid ``(num_decodes, num_kv_heads, num_splits)``: each program takes all q heads of one kv head
of one sequence (rows padded to at least 16 for ``tl.dot``) over one ``num_splits``-th of the
context. With one split the result is written directly; otherwise each split writes its
normalised partial output and log-sum-exp to scratch and ``_reduce_kernel`` combines them.
The split ranges come from ``seq_lens`` on the device, so any ``num_splits`` is correct; it is a
static launch parameter chosen in ``prepare()`` only for speed. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.attention.split_kv import decode_scratch
from pagoda_attention_triton.tile import attend_tile, dependent_start, dot_precision, pdl_launch, window_start

def decode_config(head_p: int, itemsize: int) -> dict[str, int]:
    """Keys per step and pipeline depth: 128 keys x 4 stages for rows of up to 256 bytes (head 128
    in 16 bits; H200 sweeps at batch 1 and 64, 32k), else 64 x 3 (shared memory)."""
    if head_p * itemsize <= 256:
        return dict(BLOCK_N=128, num_warps=4, num_stages=4)
    return dict(BLOCK_N=64, num_warps=4, num_stages=3)


# Values that change from step to step are not specialized on (Triton would compile a variant for
# 1 and for multiples of 16 the first time a batch shows them: seconds of stall in a server).
@triton.jit(do_not_specialize=["stride_bt"])
def _decode_kernel(
    q_ptr, o_ptr, part_o_ptr, part_lse_ptr, cache_ptr, bt_ptr, seq_lens_ptr,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kv, stride_blk, stride_tok, stride_head, stride_bt,
    scale_log2e, window, num_heads,
    GROUP: tl.constexpr, ROWS: tl.constexpr, NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr,
    USE_WINDOW: tl.constexpr, DOT_PREC: tl.constexpr, UPCAST: tl.constexpr, PDL: tl.constexpr,
):
    dependent_start(PDL)
    seq = tl.program_id(0).to(tl.int64)  # decodes come first: sequence i owns query token i
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    r = tl.arange(0, ROWS)
    row_ok = r < GROUP
    head = kvh * GROUP + r
    offs_d = tl.arange(0, HEAD_P)
    io_mask = row_ok[:, None] & (offs_d < HEAD)[None, :]
    q = tl.load(q_ptr + seq * stride_qt + head[:, None] * stride_qh + offs_d[None, :], mask=io_mask, other=0.0)
    q = q.to(cache_ptr.dtype.element_ty)
    qpos = tl.zeros([ROWS], dtype=tl.int32) + seq_len - 1

    lo = window_start(seq_len - 1, window, BLOCK_N, USE_WINDOW)
    chunk = tl.cdiv(tl.cdiv(seq_len - lo, NUM_SPLITS), BLOCK_N) * BLOCK_N
    key_lo = lo + split * chunk
    key_hi = tl.minimum(key_lo + chunk, seq_len)
    k_base = cache_ptr + kvh.to(tl.int64) * stride_head
    acc = tl.zeros([ROWS, HEAD_P], dtype=tl.float32)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    # one masked loop: an unmasked main loop plus a masked tail measured 10-25% slower here
    acc, m_i, l_i = attend_tile(
        acc, m_i, l_i, q, qpos, row_ok, k_base, k_base + stride_kv, bt_ptr + seq * stride_bt,
        key_lo, key_hi, stride_blk, stride_tok, scale_log2e, window,
        BLOCK_N, PAGE, HEAD, HEAD_P, USE_WINDOW, DOT_PREC, UPCAST, True,
    )
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    if NUM_SPLITS == 1:
        o_ptrs = o_ptr + seq * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=io_mask)
    else:
        row = (seq * num_heads + head) * NUM_SPLITS + split  # [ROWS] into [num_decodes, num_heads, NUM_SPLITS]
        tl.store(part_o_ptr + row[:, None] * HEAD_P + offs_d[None, :], out, mask=row_ok[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        tl.store(part_lse_ptr + row, lse, mask=row_ok)


@triton.jit
def _reduce_kernel(
    o_ptr, part_o_ptr, part_lse_ptr, stride_ot, stride_oh, num_heads,
    NUM_SPLITS: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr, PDL: tl.constexpr,
):
    """Combine the splits of one (sequence, q head): weights ``2^(lse_s - max lse)``."""
    dependent_start(PDL)
    seq = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_P)
    row = (seq * num_heads + head) * NUM_SPLITS + s
    lse = tl.load(part_lse_ptr + row)
    m = tl.max(lse, 0)
    w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m)))
    parts = tl.load(part_o_ptr + row[:, None] * HEAD_P + offs_d[None, :])  # [NUM_SPLITS, HEAD_P]
    out = tl.sum(parts * w[:, None], 0) / tl.maximum(tl.sum(w, 0), 1e-30)
    tl.store(o_ptr + seq * stride_ot + head * stride_oh + offs_d, out.to(o_ptr.dtype.element_ty), mask=offs_d < HEAD)


def decode_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_size]; tokens :num_decodes are decodes
    out: torch.Tensor,  # [num_tokens, num_heads, head_size]
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    num_decodes: int,
    scale: float,
    window: int | None,
    num_splits: int,
    scratch: tuple[torch.Tensor, torch.Tensor] | None,
    config: dict[str, int] | None = None,
    pdl: bool = False,
) -> None:
    """Attention for the first ``num_decodes`` sequences (one query token each).

    ``config`` overrides ``decode_config`` (BLOCK_N, num_warps, num_stages; benchmarks); ``pdl``
    launches the kernels as programmatic dependents (the backend asks the platform).
    """
    if num_decodes == 0:
        return
    _, num_heads, head = query.shape
    num_kv_heads = kv_cache.shape[3]
    group = num_heads // num_kv_heads
    head_p = triton.next_power_of_2(head)
    if num_splits > 1 and scratch is None:
        scratch = decode_scratch(num_decodes, num_heads, head, num_splits, query.device)
    part_o, part_lse = scratch if num_splits > 1 else (out, out)
    dot_prec, upcast = dot_precision(kv_cache.dtype)
    _decode_kernel[(num_decodes, num_kv_heads, num_splits)](
        query, out, part_o, part_lse, kv_cache, block_tables, seq_lens,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3), block_tables.stride(0),
        scale * 1.4426950408889634, window or 0, num_heads,
        GROUP=group, ROWS=max(16, triton.next_power_of_2(group)), NUM_SPLITS=num_splits,
        PAGE=kv_cache.shape[2], HEAD=head, HEAD_P=head_p, USE_WINDOW=bool(window),
        DOT_PREC=dot_prec, UPCAST=upcast, PDL=pdl, **(config or decode_config(head_p, kv_cache.element_size())),
        **pdl_launch(pdl),
    )
    if num_splits > 1:
        _reduce_kernel[(num_decodes, num_heads)](
            out, part_o, part_lse, out.stride(0), out.stride(1), num_heads,
            NUM_SPLITS=num_splits, HEAD=head, HEAD_P=head_p, PDL=pdl, num_warps=4, **pdl_launch(pdl),
        )
