"""Decode attention: a few query tokens per sequence (one for decodes), optionally split over the KV.

Grid ``(num_seqs, num_kv_heads, num_splits)`` over a range of sequences: each program takes the
rows (query tokens x q heads of one kv head; at least 16 for ``tl.dot``) of one sequence over one
``num_splits``-th of its context, causal within its query tokens. Decodes are one token a
sequence; the verify steps of speculative decoding bring ``k + 1`` (:func:`short_query_attention`),
which the prefill kernel would give one program per kv head over the whole context. With one split
the result is written directly; otherwise each split writes its normalised partial output and
log-sum-exp to scratch and ``_reduce_kernel`` combines them. The split ranges come from
``seq_lens`` on the device, so any ``num_splits`` is correct; it is a static launch parameter
chosen in ``prepare()`` only for speed. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.attention.split_kv import decode_scratch
from pagoda.triton_jit import dependent_start, dot_upcast, pdl_launch
from pagoda_attention_triton.tile import attend_tile, kv_scale_args, load_kv_scales, window_start

def decode_config(head_p: int, itemsize: int) -> dict[str, int]:
    """Keys per step and pipeline depth: 128 keys x 4 stages for rows of up to 256 bytes (head 128
    in 16 bits; H200 sweeps at batch 1 and 64, 32k), else 64 x 3 (shared memory)."""
    if head_p * itemsize <= 256:
        return dict(BLOCK_N=128, num_warps=4, num_stages=4)
    return dict(BLOCK_N=64, num_warps=4, num_stages=3)


# Values that change from step to step are not specialized on (Triton would compile a variant for
# 1 and for multiples of 16 the first time a batch shows them: seconds of stall in a server).
@triton.jit(do_not_specialize=["stride_bt", "seq_base", "token_base"])
def _decode_kernel(
    q_ptr, o_ptr, part_o_ptr, part_lse_ptr, cache_ptr, bt_ptr, seq_lens_ptr, qsl_ptr, k_scale_ptr, v_scale_ptr,
    seq_base, token_base,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kv, stride_blk, stride_tok, stride_head, stride_bt,
    scale_log2e, window, num_heads,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, ROWS: tl.constexpr, NUM_SPLITS: tl.constexpr,
    BLOCK_N: tl.constexpr, PAGE: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr,
    USE_WINDOW: tl.constexpr, UPCAST: tl.constexpr, PDL: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    dependent_start(PDL)
    seq = (seq_base + tl.program_id(0)).to(tl.int64)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    r = tl.arange(0, ROWS)
    t = r // GROUP_P  # [ROWS] query token within the sequence
    row_ok = (t < q_len) & (r % GROUP_P < GROUP)
    head = kvh * GROUP + r % GROUP_P
    tok = (q_start + t).to(tl.int64)
    offs_d = tl.arange(0, HEAD_P)
    io_mask = row_ok[:, None] & (offs_d < HEAD)[None, :]
    q = tl.load(q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :], mask=io_mask, other=0.0)
    if not KV_FP8:  # an FP8 cache's keys and values are converted to the query's dtype instead
        q = q.to(cache_ptr.dtype.element_ty)
    qpos = seq_len - q_len + t
    k_scale, v_scale = load_kv_scales(k_scale_ptr, v_scale_ptr, KV_FP8)

    lo = window_start(seq_len - q_len, window, BLOCK_N, USE_WINDOW)
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
        key_lo, key_hi, stride_blk, stride_tok, scale_log2e * k_scale, window,
        BLOCK_N, PAGE, HEAD, HEAD_P, USE_WINDOW, UPCAST, True, KV_FP8,
    )
    out = acc * (v_scale / tl.where(l_i == 0.0, 1.0, l_i))[:, None]
    if NUM_SPLITS == 1:
        o_ptrs = o_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=io_mask)
    else:  # rows of [tokens from token_base, num_heads, NUM_SPLITS]
        row = ((tok - token_base) * num_heads + head) * NUM_SPLITS + split
        tl.store(part_o_ptr + row[:, None] * HEAD_P + offs_d[None, :], out, mask=row_ok[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        tl.store(part_lse_ptr + row, lse, mask=row_ok)


@triton.jit(do_not_specialize=["token_base"])
def _reduce_kernel(
    o_ptr, part_o_ptr, part_lse_ptr, token_base, stride_ot, stride_oh, num_heads,
    NUM_SPLITS: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr, PDL: tl.constexpr,
):
    """Combine the splits of one (query token, q head): weights ``2^(lse_s - max lse)``."""
    dependent_start(PDL)
    i = tl.program_id(0).to(tl.int64)  # the token's row in the scratch: token token_base + i
    head = tl.program_id(1)
    s = tl.arange(0, NUM_SPLITS)
    offs_d = tl.arange(0, HEAD_P)
    row = (i * num_heads + head) * NUM_SPLITS + s
    lse = tl.load(part_lse_ptr + row)
    m = tl.max(lse, 0)
    w = tl.where(lse == float("-inf"), 0.0, tl.exp2(lse - tl.where(m == float("-inf"), 0.0, m)))
    parts = tl.load(part_o_ptr + row[:, None] * HEAD_P + offs_d[None, :])  # [NUM_SPLITS, HEAD_P]
    out = tl.sum(parts * w[:, None], 0) / tl.maximum(tl.sum(w, 0), 1e-30)
    o_row = o_ptr + (token_base + i) * stride_ot + head * stride_oh
    tl.store(o_row + offs_d, out.to(o_ptr.dtype.element_ty), mask=offs_d < HEAD)


SHORT_QUERY = 8  # most query tokens a sequence may have for short_query_attention (k + 1 of a verify step)


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
    query_start_loc: torch.Tensor | None = None,  # [num_seqs + 1] int32; None: one token a sequence
    kv_scales=None,  # an FP8 cache's KVScales
) -> None:
    """Attention for the first ``num_decodes`` sequences (one query token each).

    ``config`` overrides ``decode_config`` (BLOCK_N, num_warps, num_stages; benchmarks); ``pdl``
    launches the kernels as programmatic dependents (``pagoda.triton_jit.dependent_start``; the backend asks the
    platform).
    """
    if num_decodes == 0:
        return
    if query_start_loc is None:
        query_start_loc = torch.arange(num_decodes + 1, dtype=torch.int32, device=query.device)
    _launch(query, out, kv_cache, block_tables, seq_lens, query_start_loc, (0, num_decodes), (0, num_decodes), 1,
            scale, window, num_splits, scratch, config, pdl, kv_scales)


def short_query_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_size]
    out: torch.Tensor,  # [num_tokens, num_heads, head_size], written for tokens num_decodes:
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    num_decodes: int,
    max_query_len: int,  # at most SHORT_QUERY
    scale: float,
    window: int | None,
    num_splits: int,
    scratch: tuple[torch.Tensor, torch.Tensor] | None,
    pdl: bool = False,
    kv_scales=None,  # an FP8 cache's KVScales
) -> None:
    """Attention for sequences ``num_decodes:`` (tokens ``num_decodes:``), each of at most
    ``max_query_len`` query tokens, on the decode kernel: one program per (sequence, kv head, split)."""
    num_seqs, num_tokens = seq_lens.shape[0], query.shape[0]
    if num_seqs <= num_decodes or num_tokens <= num_decodes:
        return
    _launch(query, out, kv_cache, block_tables, seq_lens, query_start_loc, (num_decodes, num_seqs),
            (num_decodes, num_tokens - num_decodes), triton.next_power_of_2(max_query_len),
            scale, window, num_splits, scratch, None, pdl, kv_scales)


def _launch(query, out, kv_cache, block_tables, seq_lens, query_start_loc, seqs: tuple[int, int],
            tokens: tuple[int, int], query_p: int, scale: float, window: int | None, num_splits: int,
            scratch, config: dict[str, int] | None, pdl: bool, kv_scales=None) -> None:
    """The decode kernel over sequences ``seqs[0]:seqs[1]`` (tokens ``tokens[0]:tokens[0] + tokens[1]``,
    at most ``query_p`` a sequence), then the reduction where split."""
    _, num_heads, head = query.shape
    num_kv_heads = kv_cache.shape[3]
    group = num_heads // num_kv_heads
    group_p, head_p = triton.next_power_of_2(group), triton.next_power_of_2(head)
    if num_splits > 1 and scratch is None:
        scratch = decode_scratch(tokens[1], num_heads, head, num_splits, query.device)
    part_o, part_lse = scratch if num_splits > 1 else (out, out)
    k_scale, v_scale, fp8, compute_dtype = kv_scale_args(kv_cache, query, kv_scales)
    upcast = dot_upcast(compute_dtype)
    _decode_kernel[(seqs[1] - seqs[0], num_kv_heads, num_splits)](
        query, out, part_o, part_lse, kv_cache, block_tables, seq_lens, query_start_loc, k_scale, v_scale,
        seqs[0], tokens[0],
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3), block_tables.stride(0),
        scale * 1.4426950408889634, window or 0, num_heads,
        GROUP=group, GROUP_P=group_p, ROWS=max(16, query_p * group_p), NUM_SPLITS=num_splits,
        PAGE=kv_cache.shape[2], HEAD=head, HEAD_P=head_p, USE_WINDOW=bool(window),
        UPCAST=upcast, PDL=pdl, KV_FP8=fp8,
        **(config or decode_config(head_p, kv_cache.element_size())),
        **pdl_launch(pdl),
    )
    if num_splits > 1:
        _reduce_kernel[(tokens[1], num_heads)](
            out, part_o, part_lse, tokens[0], out.stride(0), out.stride(1), num_heads,
            NUM_SPLITS=num_splits, HEAD=head, HEAD_P=head_p, PDL=pdl, num_warps=4, **pdl_launch(pdl),
        )
