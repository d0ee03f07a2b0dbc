"""Multi-head latent attention (DeepSeek-V2/V3) over a paged latent cache, in Triton.

The cache of a layer is ``[num_blocks, block_size, latent_size]``: per token the kv latent (``RANK`` values)
then the rotated rope key (``ROPE``). Queries arrive absorbed (``RANK + ROPE`` values per head), so all heads
score the same rows: a tile is rows of (query token, head) pairs of one sequence, each key step loads
``BLOCK_N`` cached rows once (their latent and rope parts), scores them with two dots and accumulates the
latent part as the values (``acc [ROWS, RANK]`` in fp32, online softmax in log2 space). The output is
``[num_tokens, num_heads, RANK]``; the model applies each head's value up-projection.

Grid ``(programs, cdiv(num_heads, BLOCK_H), num_splits)``. Decodes: one program per sequence and head block,
the context split ``num_splits`` ways (split-KV: each split writes its normalised partial output and
log2-sum-exp to scratch, and :func:`pagoda_attention_triton.decode._reduce_kernel` combines them).
Prefills and chunks after a cached prefix: blocks of ``BLOCK_T`` query tokens (found on the device by
``prefill._find_query_block``, a static grid bounded by the token count), causal, unsplit. No host sync.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.attention.split_kv import decode_scratch
from pagoda_attention_triton.decode import _reduce_kernel
from pagoda_attention_triton.prefill import _find_query_block
from pagoda.triton_jit import dependent_start, dot_upcast, pdl_launch
from pagoda_attention_triton.tile import online_softmax_step

MAX_BLOCK_H = 16  # heads per program: a [ROWS, RANK] fp32 accumulator (RANK 512) must fit in registers


def mla_config(rank_p: int, decode: bool) -> dict[str, int]:
    """Rows of a tile and keys per step (a first cut, not yet tuned on a GPU): 16 rows (one decode token x
    16 heads) or 32 (prefill: 2 tokens x 16 heads), 32 keys of a 512-wide latent per step, 64 for narrow ones."""
    block_n = 32 if rank_p >= 256 else 64
    if decode:
        return dict(ROWS=16, BLOCK_N=block_n, num_warps=4, num_stages=2)
    return dict(ROWS=32, BLOCK_N=block_n, num_warps=8 if rank_p >= 256 else 4, num_stages=2)


@triton.jit
def _write_latent_kernel(latent_ptr, cache_ptr, slot_ptr, stride_lt, D: tl.constexpr, D_P: tl.constexpr,
                         PDL: tl.constexpr):
    """One program per token: copy its latent row to its slot (negative slots are padding)."""
    dependent_start(PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    d = tl.arange(0, D_P)
    mask = (d < D) & (tl.zeros([D_P], dtype=tl.int64) + slot >= 0)  # a tensor: the interpreter rejects scalar masks
    row = tl.load(latent_ptr + token * stride_lt + d, mask=mask)
    tl.store(cache_ptr + slot * D + d, row.to(cache_ptr.dtype.element_ty), mask=mask)


def write_latent(latent: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor, pdl: bool = False) -> None:
    """Store ``latent`` ``[num_tokens, latent_size]`` into ``kv_cache`` ``[num_blocks, block_size, latent_size]``
    at ``slot_mapping`` (in place, no host sync)."""
    num_tokens, d = latent.shape
    if num_tokens == 0:
        return
    assert latent.stride(1) == 1 and kv_cache.is_contiguous(), "latent rows and the cache must be dense"
    _write_latent_kernel[(num_tokens,)](latent, kv_cache, slot_mapping, latent.stride(0), D=d,
                                        D_P=triton.next_power_of_2(d), PDL=pdl, **pdl_launch(pdl))


@triton.jit(do_not_specialize=["seq_lo", "seq_hi", "token_base", "stride_bt"])
def _mla_kernel(
    q_ptr, o_ptr, part_o_ptr, part_lse_ptr, cache_ptr, bt_ptr, seq_lens_ptr, qsl_ptr,
    seq_lo, seq_hi, token_base,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_blk, stride_tok, stride_bt,
    scale_log2e, num_heads,
    DECODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, ROWS: tl.constexpr,
    NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr,
    RANK: tl.constexpr, RANK_P: tl.constexpr, ROPE: tl.constexpr, ROPE_P: tl.constexpr,
    UPCAST: tl.constexpr, PDL: tl.constexpr,
):
    dependent_start(PDL)
    if DECODE:  # one program per sequence (one query token)
        seq, qb = seq_lo + tl.program_id(0), 0
    else:
        seq, qb = _find_query_block(qsl_ptr, tl.program_id(0), seq_lo, seq_hi, BLOCK_T)
    seq = seq.to(tl.int64)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    r = tl.arange(0, ROWS)
    t = qb * BLOCK_T + r // BLOCK_H  # [ROWS] query token within the sequence
    head = tl.program_id(1) * BLOCK_H + r % BLOCK_H
    row_ok = (r < BLOCK_T * BLOCK_H) & (t < q_len) & (head < num_heads)
    tok = (q_start + t).to(tl.int64)
    qpos = seq_len - q_len + t
    offs_c, offs_r = tl.arange(0, RANK_P), tl.arange(0, ROPE_P)
    c_ok, r_ok = offs_c < RANK, offs_r < ROPE
    q_row = q_ptr + tok[:, None] * stride_qt + head[:, None] * stride_qh
    q_c = tl.load(q_row + offs_c[None, :], mask=row_ok[:, None] & c_ok[None, :], other=0.0)  # [ROWS, RANK_P]
    q_r = tl.load(q_row + RANK + offs_r[None, :], mask=row_ok[:, None] & r_ok[None, :], other=0.0)  # [ROWS, ROPE_P]
    q_c, q_r = q_c.to(cache_ptr.dtype.element_ty), q_r.to(cache_ptr.dtype.element_ty)
    if UPCAST:
        q_c, q_r = q_c.to(tl.float32), q_r.to(tl.float32)

    last = tl.minimum(qb * BLOCK_T + BLOCK_T, q_len)  # one past the block's last query token
    visible_hi = tl.where(qb * BLOCK_T < q_len, seq_len - q_len + last, 0)  # keys [0, visible_hi) some row sees
    chunk = tl.cdiv(tl.cdiv(visible_hi, NUM_SPLITS), BLOCK_N) * BLOCK_N
    key_lo = split * chunk
    key_hi = tl.minimum(key_lo + chunk, visible_hi)
    acc = tl.zeros([ROWS, RANK_P], dtype=tl.float32)
    m_i = tl.full([ROWS], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([ROWS], dtype=tl.float32)
    offs_n = tl.arange(0, BLOCK_N)
    for start in range(key_lo, key_hi, BLOCK_N):
        j = start + offs_n  # [BLOCK_N] key positions
        j_ok = j < key_hi
        page = tl.load(bt_ptr + seq * stride_bt + j // PAGE, mask=j_ok, other=0).to(tl.int64)
        row_off = page * stride_blk + (j % PAGE) * stride_tok  # [BLOCK_N]
        c = tl.load(cache_ptr + row_off[:, None] + offs_c[None, :], mask=j_ok[:, None] & c_ok[None, :], other=0.0)
        pe = tl.load(cache_ptr + row_off[:, None] + RANK + offs_r[None, :], mask=j_ok[:, None] & r_ok[None, :],
                     other=0.0)
        if UPCAST:
            c, pe = c.to(tl.float32), pe.to(tl.float32)
        s = tl.dot(q_c, tl.trans(c), input_precision="ieee")
        s = (s + tl.dot(q_r, tl.trans(pe), input_precision="ieee")) * scale_log2e  # [ROWS, BLOCK_N]
        visible = row_ok[:, None] & j_ok[None, :] & (j[None, :] <= qpos[:, None])
        s = tl.where(visible, s, float("-inf"))
        p, alpha, m_new, l_i = online_softmax_step(s, m_i, l_i)
        acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c, input_precision="ieee")
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    if NUM_SPLITS == 1:
        o_ptrs = o_ptr + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_c[None, :]
        tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & c_ok[None, :])
    else:  # rows of [tokens from token_base, num_heads, NUM_SPLITS] in the scratch
        row = ((tok - token_base) * num_heads + head) * NUM_SPLITS + split
        tl.store(part_o_ptr + row[:, None] * RANK_P + offs_c[None, :], out, mask=row_ok[:, None])
        lse = tl.where(l_i == 0.0, float("-inf"), m_i + tl.log2(tl.where(l_i == 0.0, 1.0, l_i)))
        tl.store(part_lse_ptr + row, lse, mask=row_ok)


def mla_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, rank + rope]; tokens :num_decodes are decodes
    out: torch.Tensor,  # [num_tokens, num_heads, rank]
    kv_cache: torch.Tensor,  # [num_blocks, block_size, rank + rope]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    num_decodes: int,
    rank: int,
    scale: float,
    num_splits: int,
    scratch: tuple[torch.Tensor, torch.Tensor] | None,
    pdl: bool = False,
    configs: tuple[dict[str, int] | None, dict[str, int] | None] = (None, None),
) -> None:
    """The decodes (split ``num_splits`` ways over their context), then every other sequence (unsplit).
    ``configs`` overrides :func:`mla_config` for the decode and the prefill launch (tests, benchmarks)."""
    num_tokens, num_seqs = query.shape[0], seq_lens.shape[0]
    args = (query, out, kv_cache, block_tables, seq_lens, query_start_loc, rank, scale, pdl)
    if num_decodes:
        _launch(*args, True, (0, num_decodes), num_decodes, num_splits, scratch, configs[0])
    if num_seqs > num_decodes and num_tokens > num_decodes:
        _launch(*args, False, (num_decodes, num_seqs), num_tokens - num_decodes, 1, None, configs[1])


def _launch(query, out, kv_cache, block_tables, seq_lens, query_start_loc, rank: int, scale: float, pdl: bool,
            decode: bool, seqs: tuple[int, int], tokens: int, num_splits: int, scratch,
            config: dict[str, int] | None) -> None:
    """Sequences ``seqs[0]:seqs[1]``, whose ``tokens`` query tokens start at token ``seqs[0]`` (the decodes come
    first, one token each): one program per decode, else per block of ``BLOCK_T`` query tokens."""
    num_heads, rope = query.shape[1], kv_cache.shape[2] - rank
    rank_p, rope_p = triton.next_power_of_2(rank), max(16, triton.next_power_of_2(rope))
    token_base, num_seqs = seqs[0], seqs[1] - seqs[0]
    cfg = dict(config or mla_config(rank_p, decode))
    rows = cfg.pop("ROWS")
    block_h = min(triton.next_power_of_2(num_heads), MAX_BLOCK_H, rows)
    block_t = 1 if decode else max(1, rows // block_h)
    programs = num_seqs if decode else tokens // block_t + num_seqs  # bounds each sequence's cdiv(q_len, BLOCK_T)
    if num_splits > 1 and scratch is None:
        scratch = decode_scratch(tokens, num_heads, rank, num_splits, query.device)
    part_o, part_lse = scratch if num_splits > 1 else (out, out)
    upcast = dot_upcast(kv_cache.dtype)
    _mla_kernel[(programs, triton.cdiv(num_heads, block_h), num_splits)](
        query, out, part_o, part_lse, kv_cache, block_tables, seq_lens, query_start_loc,
        seqs[0], seqs[1], token_base,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), kv_cache.stride(0), kv_cache.stride(1),
        block_tables.stride(0), scale * 1.4426950408889634, num_heads,
        DECODE=decode, BLOCK_T=block_t, BLOCK_H=block_h, ROWS=max(16, block_t * block_h), NUM_SPLITS=num_splits,
        PAGE=kv_cache.shape[1], RANK=rank, RANK_P=rank_p, ROPE=rope, ROPE_P=rope_p,
        UPCAST=upcast, PDL=pdl, **cfg, **pdl_launch(pdl),
    )
    if num_splits > 1:
        _reduce_kernel[(tokens, num_heads)](
            out, part_o, part_lse, token_base, out.stride(0), out.stride(1), num_heads,
            NUM_SPLITS=num_splits, HEAD=rank, HEAD_P=rank_p, PDL=pdl, num_warps=4, **pdl_launch(pdl),
        )
