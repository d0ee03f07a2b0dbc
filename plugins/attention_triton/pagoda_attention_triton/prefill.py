"""Prefill (and chunked-prefill) attention: tiles of query tokens x the q heads of a kv head.

The grid is static: ``num_prefill_tokens // BLOCK_Q + num_prefill_seqs`` programs along axis 0
(an upper bound on the query blocks of all prefills) by ``num_kv_heads``. Each program finds its
sequence by a binary search over ``query_start_loc`` on the device; programs past the end of
their sequence's queries attend nothing and store nothing. No host synchronisation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.triton_jit import dot_upcast
from pagoda_attention_triton.tile import attend_tile, kv_scale_args, load_kv_scales, window_start


@triton.jit
def _find_query_block(qsl_ptr, pid, seq_lo, seq_hi, BLOCK_Q: tl.constexpr):
    """(sequence, query block within it) for program ``pid``; block ``i`` of seq ``s`` is
    program ``(qsl[s] - qsl[seq_lo]) // BLOCK_Q + (s - seq_lo) + i``."""
    base = tl.load(qsl_ptr + seq_lo)
    lo = pid * 0 + seq_lo  # tensors, not ints: an int argument equal to 1 arrives as a constexpr
    hi = pid * 0 + seq_hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        first = (tl.load(qsl_ptr + mid) - base) // BLOCK_Q + mid - seq_lo
        lo = tl.where(first <= pid, mid, lo)
        hi = tl.where(first <= pid, hi, mid)
    first = (tl.load(qsl_ptr + lo) - base) // BLOCK_Q + lo - seq_lo
    return lo, pid - first


# Values that change from step to step are not specialized on (Triton would compile a variant for
# 1 and for multiples of 16 the first time a batch shows them: seconds of stall in a server).
@triton.jit(do_not_specialize=["seq_lo", "seq_hi", "stride_bt"])
def _prefill_kernel(
    q_ptr, o_ptr, cache_ptr, bt_ptr, qsl_ptr, seq_lens_ptr, k_scale_ptr, v_scale_ptr,
    seq_lo, seq_hi,
    stride_qt, stride_qh, stride_ot, stride_oh,
    stride_kv, stride_blk, stride_tok, stride_head, stride_bt,
    scale_log2e, window,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr,
    USE_WINDOW: tl.constexpr, UPCAST: tl.constexpr, KV_FP8: tl.constexpr,
):
    ROWS: tl.constexpr = BLOCK_Q * GROUP_P
    kvh = tl.program_id(1)
    seq, qb = _find_query_block(qsl_ptr, tl.program_id(0), seq_lo, seq_hi, BLOCK_Q)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq)
    r = tl.arange(0, ROWS)
    tok = qb * BLOCK_Q + r // GROUP_P  # [ROWS] query index within the sequence
    g = r % GROUP_P
    row_ok = (tok < q_len) & (g < GROUP)
    head = kvh * GROUP + g
    qpos = seq_len - q_len + tok
    offs_d = tl.arange(0, HEAD_P)
    io_mask = row_ok[:, None] & (offs_d < HEAD)[None, :]
    tok64 = (q_start + tok).to(tl.int64)
    q = tl.load(q_ptr + tok64[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :], mask=io_mask, other=0.0)
    if not KV_FP8:  # an FP8 cache's keys and values are converted to the query's dtype instead
        q = q.to(cache_ptr.dtype.element_ty)
    k_scale, v_scale = load_kv_scales(k_scale_ptr, v_scale_ptr, KV_FP8)
    scale_log2e = scale_log2e * k_scale

    first_tok = qb * BLOCK_Q
    last_tok = tl.minimum(first_tok + BLOCK_Q, q_len) - 1
    key_lo = window_start(seq_len - q_len + first_tok, window, BLOCK_N, USE_WINDOW)
    key_hi = tl.where(first_tok < q_len, seq_len - q_len + last_tok + 1, key_lo)
    k_base = cache_ptr + kvh.to(tl.int64) * stride_head
    acc = tl.zeros([ROWS, HEAD_P], dtype=tl.float32)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    bt_row = bt_ptr + seq.to(tl.int64) * stride_bt
    # keys below the tile's first query position are visible to all its rows: no masks there
    key_mid = key_lo
    if not USE_WINDOW:
        key_mid = tl.minimum((seq_len - q_len + first_tok) // BLOCK_N * BLOCK_N, key_hi)
        acc, m_i, l_i = attend_tile(
            acc, m_i, l_i, q, qpos, row_ok, k_base, k_base + stride_kv, bt_row,
            key_lo, key_mid, stride_blk, stride_tok, scale_log2e, window,
            BLOCK_N, PAGE, HEAD, HEAD_P, USE_WINDOW, UPCAST, False, KV_FP8,
        )
    acc, m_i, l_i = attend_tile(
        acc, m_i, l_i, q, qpos, row_ok, k_base, k_base + stride_kv, bt_row,
        key_mid, key_hi, stride_blk, stride_tok, scale_log2e, window,
        BLOCK_N, PAGE, HEAD, HEAD_P, USE_WINDOW, UPCAST, True, KV_FP8,
    )
    out = acc * (v_scale / tl.where(l_i == 0.0, 1.0, l_i))[:, None]
    o_ptrs = o_ptr + tok64[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=io_mask)


SHORT_PREFILL = 2048  # longest query that uses the small tiles (H200: faster up to 2k, even at 8k)


def prefill_config(head_size: int, group: int, max_query_len: int = SHORT_PREFILL + 1) -> dict[str, int]:
    """Tile sizes: query rows (query tokens x q heads of a kv head) by keys per step.

    Up to ``SHORT_PREFILL`` query tokens: 64 rows of 32 keys, two stages (more programs, less
    causal waste on the diagonal); longer: 128 rows of 64 keys, three stages. Head size 256
    always uses 64 x 32 (shared memory).
    """
    head_p = triton.next_power_of_2(head_size)
    group_p = triton.next_power_of_2(group)
    if head_p > 128 or max_query_len <= SHORT_PREFILL:
        rows, block_n, stages = 64, 32, 2 if head_p <= 128 else 3
    else:
        rows, block_n, stages = 128, 64, 3
    return dict(BLOCK_Q=max(1, rows // group_p), BLOCK_N=block_n, num_warps=4, num_stages=stages)


def prefill_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_size]
    out: torch.Tensor,  # [num_tokens, num_heads, head_size], written for the prefill tokens
    kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    num_decodes: int,
    scale: float,
    window: int | None,
    max_query_len: int,
    config: dict[str, int] | None = None,
    kv_scales=None,  # an FP8 cache's KVScales
) -> None:
    """Attention for sequences ``num_decodes:`` (tokens ``num_decodes:``) of the batch.

    ``config`` overrides ``prefill_config`` (BLOCK_Q, BLOCK_N, num_warps, num_stages; benchmarks).
    """
    num_seqs = seq_lens.shape[0]
    num_tokens, num_heads, head = query.shape
    num_prefill_tokens, num_prefills = num_tokens - num_decodes, num_seqs - num_decodes
    if num_prefills <= 0 or num_prefill_tokens <= 0:
        return
    num_kv_heads = kv_cache.shape[3]
    group = num_heads // num_kv_heads
    cfg = config or prefill_config(head, group, max_query_len)
    k_scale, v_scale, fp8, compute_dtype = kv_scale_args(kv_cache, query, kv_scales)
    upcast = dot_upcast(compute_dtype)
    grid = (num_prefill_tokens // cfg["BLOCK_Q"] + num_prefills, num_kv_heads)
    _prefill_kernel[grid](
        query, out, kv_cache, block_tables, query_start_loc, seq_lens, k_scale, v_scale,
        num_decodes, num_seqs,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1),
        kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2), kv_cache.stride(3), block_tables.stride(0),
        scale * 1.4426950408889634, window or 0,
        GROUP=group, GROUP_P=triton.next_power_of_2(group), PAGE=kv_cache.shape[2],
        HEAD=head, HEAD_P=triton.next_power_of_2(head), USE_WINDOW=bool(window),
        UPCAST=upcast, KV_FP8=fp8, **cfg,
    )
