"""The inner loop shared by the prefill and decode kernels: online softmax over paged keys.

A *tile* is a set of query rows (query tokens x the q heads of one kv head) of one sequence;
``attend_tile`` walks keys ``[key_lo, key_hi)`` of that sequence in ``BLOCK_N`` steps, finding
each key's page through the block table, and updates the fp32 running max ``m``, sum ``l``
and accumulator ``acc`` (all in log2 space: scores are pre-multiplied by ``log2(e)``).
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl


def kv_scale_args(kv_cache: torch.Tensor, query: torch.Tensor, kv_scales) -> tuple[torch.Tensor, torch.Tensor, bool,
                                                                                   torch.dtype]:
    """(k_scale, v_scale, KV_FP8, the dtype the dots compute in) for a kernel reading ``kv_cache``: an FP8
    cache's scales and ``query``'s dtype, else the cache itself twice (never read) and the cache's dtype."""
    if kv_cache.element_size() == 1:
        assert kv_scales is not None, "an FP8 cache needs its layer's kv_scales"
        return kv_scales.k_scale, kv_scales.v_scale, True, query.dtype
    return kv_cache, kv_cache, False, kv_cache.dtype


@triton.jit
def load_kv_scales(k_scale_ptr, v_scale_ptr, KV_FP8: tl.constexpr):
    """(k_scale, v_scale) of an FP8 cache, else (1, 1)."""
    k_scale, v_scale = 1.0, 1.0
    if KV_FP8:
        k_scale = tl.load(k_scale_ptr)
        v_scale = tl.load(v_scale_ptr)
    return k_scale, v_scale


@triton.jit
def online_softmax_step(s, m_i, l_i):
    """Fold scores ``s`` [ROWS, BLOCK_N] (log2 space, -inf where hidden) into the running max ``m_i`` and sum
    ``l_i``: returns (the weights ``p``, the factor ``alpha`` that rescales what was accumulated, max, sum)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
    p = tl.exp2(s - m_use[:, None])
    alpha = tl.exp2(m_i - m_use)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, 1)


@triton.jit
def attend_tile(
    acc, m_i, l_i,  # [ROWS, HEAD_P] fp32, [ROWS] fp32, [ROWS] fp32
    q,  # [ROWS, HEAD_P] in the cache dtype (an FP8 cache: the model dtype, keys and values converted to it)
    qpos, row_ok,  # [ROWS] int32 position of each row's query token, [ROWS] bool
    k_base, v_base,  # cache pointers already offset to this kv head
    bt_row_ptr,  # this sequence's row of the block table
    key_lo, key_hi,
    stride_blk, stride_tok, scale_log2e, window,
    BLOCK_N: tl.constexpr, PAGE: tl.constexpr, HEAD: tl.constexpr, HEAD_P: tl.constexpr,
    USE_WINDOW: tl.constexpr, UPCAST: tl.constexpr, MASKED: tl.constexpr = True,
    KV_FP8: tl.constexpr = False,
):
    """``MASKED=False`` is for keys every valid row sees (below the tile's first query, no window):
    no position masks and no bounds checks on the loads. ``KV_FP8``: the cache holds FP8 keys and values,
    converted to ``q``'s dtype as they are loaded; their scales are the caller's (``scale_log2e`` carries
    ``k_scale``, the output is multiplied by ``v_scale``)."""
    if UPCAST:
        q = q.to(tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_P)
    d_ok = offs_d < HEAD
    for start in range(key_lo, key_hi, BLOCK_N):
        j = start + offs_n  # [BLOCK_N] key positions
        j_ok = j < key_hi
        if MASKED:
            page = tl.load(bt_row_ptr + j // PAGE, mask=j_ok, other=0).to(tl.int64)
        else:
            page = tl.load(bt_row_ptr + j // PAGE).to(tl.int64)
        row_off = page * stride_blk + (j % PAGE) * stride_tok  # [BLOCK_N]
        k_ptrs = k_base + row_off[None, :] + offs_d[:, None]  # [HEAD_P, BLOCK_N]
        if MASKED or HEAD != HEAD_P:
            k = tl.load(k_ptrs, mask=j_ok[None, :] & d_ok[:, None], other=0.0)
        else:
            k = tl.load(k_ptrs)
        if KV_FP8:
            k = k.to(q.dtype)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, k, input_precision="ieee") * scale_log2e  # [ROWS, BLOCK_N]
        if MASKED:
            visible = row_ok[:, None] & j_ok[None, :] & (j[None, :] <= qpos[:, None])
            if USE_WINDOW:
                visible = visible & (j[None, :] > qpos[:, None] - window)
            s = tl.where(visible, s, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_step(s, m_i, l_i)
        v_ptrs = v_base + row_off[:, None] + offs_d[None, :]  # [BLOCK_N, HEAD_P]
        if MASKED or HEAD != HEAD_P:
            v = tl.load(v_ptrs, mask=j_ok[:, None] & d_ok[None, :], other=0.0)
        else:
            v = tl.load(v_ptrs)
        if KV_FP8:
            v = v.to(q.dtype)
        if UPCAST:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision="ieee")
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def window_start(first_qpos, window, BLOCK_N: tl.constexpr, USE_WINDOW: tl.constexpr):
    """First key any row at position >= ``first_qpos`` can see, rounded down to ``BLOCK_N``."""
    if USE_WINDOW:
        return tl.maximum(first_qpos - window + 1, 0) // BLOCK_N * BLOCK_N
    return first_qpos * 0
