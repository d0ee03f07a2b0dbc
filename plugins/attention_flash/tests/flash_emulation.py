"""A torch model of the flash kernels' control flow (csrc/attention/flash_prefill.cu and
flash_decode.cu), program by program: the query-block search, key ranges, block-table addressing
with zero-filled rows past the range, the prefill warps' rows (two m16 row tiles per warp for head
64/128, one for 256), which key tiles each warp skips or masks (with the kernel's mask arithmetic),
split-KV slices, the decode kernel's (token, q head) rows and short queries' causal masks, the decode
loader's one-lookup tiles, the per-warp online softmax, the merge of the warps and the split reduction's
groups. Tensor-core products are plain fp32
matmuls here (their lane layouts are tested in test_fragment_layouts.py); probabilities are rounded
to the cache dtype before P @ V, as in the kernels.
"""

from __future__ import annotations


import torch

BLOCK_M = 128  # query tokens per prefill program (kFlashPrefillBlockM)
DECODE_KEYS, DECODE_ROWS, DECODE_WARPS = 16, 16, 4
LOG2E = 1.4426950408889634
NEG_INF = float("-inf")


def prefill_block_n(head_size: int) -> int:
    return 64 if head_size <= 128 else 32


def prefill_warp_rows(head_size: int) -> int:
    """Query rows per prefill warp: two m16 row tiles (head 64/128; 4 warps) or one (head 256; 8 warps)."""
    return 32 if head_size <= 128 else 16


def prefill_mask(bn: int, warp_rows: int, key0: int, pos0: int, window: int) -> torch.Tensor:
    """The kernel's mask_scores for one warp, as [warp_rows, bn] booleans: the lane of fragment row g
    and column pair t holds d = rel + c with rel = pos0 + g - key0 - 2t and c = 16i + 8(e >> 1) -
    8nt - (e & 1) for row 16i + g + 8(e >> 1) and key 8nt + 2t + (e & 1); visible iff rel >= -c and
    rel_window < -c."""
    visible = torch.zeros(warp_rows, bn, dtype=torch.bool)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        rel = pos0 + g - key0 - 2 * t
        rel_window = rel - window if window > 0 else -(2**31) // 2
        for i in range(warp_rows // 16):
            for nt in range(bn // 8):
                for e in range(4):
                    c = 16 * i + 8 * (e >> 1) - 8 * nt - (e & 1)
                    row, key = 16 * i + g + 8 * (e >> 1), 8 * nt + 2 * t + (e & 1)
                    visible[row, key] = rel >= -c and rel_window < -c
    return visible


def find_query_block(qsl: list[int], pid: int, seq_lo: int, seq_hi: int, pack: int = 1) -> tuple[int, int]:
    base, lo, hi = qsl[seq_lo], seq_lo, seq_hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (qsl[mid] - base) * pack // BLOCK_M + mid - seq_lo <= pid:
            lo = mid
        else:
            hi = mid
    return lo, pid - ((qsl[lo] - base) * pack // BLOCK_M + lo - seq_lo)


def packed_mask(bn: int, warp_rows: int, key0: int, pos: torch.Tensor, window: int) -> torch.Tensor:
    """mask_scores_packed for one warp, as [warp_rows, bn] booleans: row r at position pos[r]."""
    keys = key0 + torch.arange(bn)
    visible = keys[None, :] <= pos[:, None]
    if window > 0:
        visible &= keys[None, :] > pos[:, None] - window
    return visible


def paged_rows(half: torch.Tensor, bt_row: torch.Tensor, positions: torch.Tensor, key_hi: int, kv_head: int) -> torch.Tensor:
    """[len(positions), D] fp32 rows of one cache half (K or V), zeros where ``pos >= key_hi``."""
    block_size = half.shape[1]
    valid = positions < key_hi
    pos = torch.where(valid, positions, 0)
    rows = half[bt_row[pos // block_size].long(), pos % block_size, kv_head].float()
    return torch.where(valid[:, None], rows, 0.0)


def decode_tile_rows(half: torch.Tensor, bt_row: torch.Tensor, key0: int, key_hi: int, kv_head: int) -> torch.Tensor:
    """The decode loader (load_kv_tile): a 16-key tile inside one cache block reads the block table once and
    steps rows by the token stride (rows past key_hi are still that block's, and zero-filled); any other
    tile finds each row's block."""
    block_size = half.shape[1]
    page_index = key0 // block_size
    in_page = key0 - page_index * block_size
    keys = key0 + torch.arange(DECODE_KEYS)
    if in_page + DECODE_KEYS > block_size:
        return paged_rows(half, bt_row, keys, key_hi, kv_head)
    rows = half[int(bt_row[page_index]), in_page : in_page + DECODE_KEYS, kv_head].float()
    return torch.where((keys < key_hi)[:, None], rows, 0.0)


def reduce_splits(part_o: torch.Tensor, part_lse: torch.Tensor, d: int) -> torch.Tensor:
    """flash_decode_reduce_kernel: 128 / (d / 4) split groups, group g takes splits g, g + groups, ... eight
    at a time with a running max; then the groups are merged. [seqs, heads, splits, d] -> [seqs, heads, d]."""
    groups, batch = 128 // (d // 4), 8
    num_splits = part_lse.shape[-1]
    maxes, sums, accs = [], [], []
    for g in range(groups):
        row_max = torch.full(part_lse.shape[:-1], NEG_INF)
        total = torch.zeros(part_lse.shape[:-1])
        acc = torch.zeros(part_o.shape[:-2] + (d,))
        for s0 in range(g, num_splits, groups * batch):
            chosen = list(range(s0, num_splits, groups))[:batch]
            lse, part = part_lse[..., chosen], part_o[..., chosen, :]
            batch_max = torch.maximum(row_max, lse.max(-1).values)
            live = batch_max != NEG_INF  # a batch of empty splits adds nothing
            alpha = torch.where(live, torch.exp2(row_max - torch.where(live, batch_max, 0.0)), 1.0)
            row_max = torch.where(live, batch_max, row_max)
            weight = torch.exp2(lse - torch.where(live, row_max, 0.0)[..., None])
            weight = torch.where(live[..., None], weight, 0.0)
            total = total * alpha + weight.sum(-1)
            acc = acc * alpha[..., None] + (weight[..., None] * part).sum(-2)
        maxes.append(row_max), sums.append(total), accs.append(acc)
    total_max = torch.stack(maxes).max(0).values
    base = torch.where(total_max == NEG_INF, 0.0, total_max)
    weights = [torch.exp2(m - base) for m in maxes]
    total = sum(w * t for w, t in zip(weights, sums))
    acc = sum(w[..., None] * a for w, a in zip(weights, accs))
    return acc * torch.where(total > 0, 1.0 / torch.where(total > 0, total, 1.0), 0.0)[..., None]


class Softmax:
    """Running max (log2 domain), sum and fp32 output of some rows (one warp's fragment rows)."""

    def __init__(self, rows: int, d: int) -> None:
        self.m = torch.full((rows,), NEG_INF)
        self.l = torch.zeros(rows)
        self.o = torch.zeros(rows, d)

    def update(self, s: torch.Tensor, v: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> None:
        """``s``: scores times ``scale`` = the scaled scores (the prefill kernel keeps raw scores and
        scales inside the exponent: p = 2^(s * scale - m); decode passes them scaled)."""
        row_max = torch.maximum(self.m, s.max(1).values * scale)
        base = torch.where(row_max == NEG_INF, 0.0, row_max)
        alpha = torch.exp2(self.m - base)
        p = torch.exp2(s * scale - base[:, None])
        self.l = self.l * alpha + p.sum(1)
        self.o = self.o * alpha[:, None] + p.to(dtype).float() @ v
        self.m = row_max


def emulate_prefill(out, query, kv_cache, block_tables, qsl_t, seq_lens_t, num_decodes, scale, window,
                    packed: bool = False) -> None:
    """flash_prefill_kernel: a program's 128 rows are query tokens of one q head, or (``packed``,
    the default where group > 1) (token, q head) pairs of one kv head, token-major."""
    num_tokens, num_heads, d = query.shape
    num_kv_heads, bn, warp_rows = kv_cache.shape[3], prefill_block_n(d), prefill_warp_rows(d)
    group = num_heads // num_kv_heads
    pack = group if packed else 1
    qsl, seq_lens = qsl_t.tolist(), seq_lens_t.tolist()
    num_seqs = len(seq_lens)
    grid_x = (num_tokens - num_decodes) * pack // BLOCK_M + (num_seqs - num_decodes)
    scale2 = scale * LOG2E
    masks: dict[tuple[int, int], torch.Tensor] = {}
    for x, y in ((x, y) for x in range(grid_x) for y in range(num_kv_heads if packed else num_heads)):
        seq, block = find_query_block(qsl, grid_x - 1 - x, num_decodes, num_seqs, pack)
        q_start, q_len, seq_len = qsl[seq], qsl[seq + 1] - qsl[seq], seq_lens[seq]
        m0 = block * BLOCK_M
        if m0 >= q_len * pack:
            continue
        rows = min(BLOCK_M, q_len * pack - m0)
        pos_base = seq_len - q_len
        first_pos = pos_base + m0 // pack
        key_hi = pos_base + (m0 + rows - 1) // pack + 1
        key_lo = max(first_pos - window + 1, 0) // bn * bn if window > 0 else 0
        num_tiles = (key_hi - key_lo + bn - 1) // bn
        f = m0 + torch.arange(BLOCK_M)  # the block's rows: token f // pack, q head head0 + f % pack
        kv_head = y if packed else y // group
        head0 = kv_head * group if packed else y
        tokens, heads, pos = q_start + f // pack, head0 + f % pack, pos_base + f // pack
        q = torch.zeros(BLOCK_M, d)  # the Q tile: rows past the block's valid rows zero-filled
        q[:rows] = query[tokens[:rows], heads[:rows]].float()
        result = torch.zeros(BLOCK_M, d)
        for row0 in range(0, BLOCK_M, warp_rows):  # one warp's rows
            warp_first = pos_base + (m0 + row0) // pack
            warp_last = pos_base + (m0 + min(row0 + warp_rows, rows) - 1) // pack if row0 < rows else -1
            state = Softmax(warp_rows, d)
            for tile in range(num_tiles):
                key0 = key_lo + tile * bn
                after_all = key0 > warp_last
                before_all = window > 0 and key0 + bn - 1 <= warp_first - window
                if after_all or before_all:
                    continue
                keys = key0 + torch.arange(bn)
                k = paged_rows(kv_cache[0], block_tables[seq], keys, key_hi, kv_head)
                v = paged_rows(kv_cache[1], block_tables[seq], keys, key_hi, kv_head)
                s = q[row0 : row0 + warp_rows] @ k.T
                if key0 + bn - 1 > warp_first or (window > 0 and key0 <= warp_last - window):
                    if packed:
                        s = torch.where(packed_mask(bn, warp_rows, key0, pos[row0 : row0 + warp_rows], window),
                                        s, NEG_INF)
                    else:  # the mask depends on key0 - pos0 only: cache it by that difference
                        rel = warp_first - key0
                        if (rel, window) not in masks:
                            masks[(rel, window)] = prefill_mask(bn, warp_rows, key0, warp_first, window)
                        s = torch.where(masks[(rel, window)], s, NEG_INF)
                state.update(s, v, kv_cache.dtype, scale2)
            inv = torch.where(state.l > 0, 1.0 / state.l, 0.0)
            result[row0 : row0 + warp_rows] = state.o * inv[:, None]
        out[tokens[:rows], heads[:rows]] = result[:rows].to(out.dtype)


def emulate_decode(out, query, kv_cache, block_tables, qsl_t, seq_lens_t, seqs: range, query_p: int, scale, window,
                   num_splits) -> None:
    """flash_decode_kernel over a DecodeRange (sequences ``seqs``, each at most ``query_p`` query tokens):
    rows f = token * group + q head of a kv head, 16 a program; tiles every row sees whole unmasked,
    the others masked key by key (past the slice, past a row's token, before its window)."""
    _, num_heads, d = query.shape
    num_kv_heads = kv_cache.shape[3]
    group = num_heads // num_kv_heads
    row_blocks = -(-(query_p * group) // DECODE_ROWS)
    qsl, seq_lens = qsl_t.tolist(), seq_lens_t.tolist()
    token_lo, num_tokens = qsl[seqs.start], qsl[seqs.stop] - qsl[seqs.start]
    part_o = torch.full((num_tokens, num_heads, num_splits, d), float("nan"))
    part_lse = torch.full((num_tokens, num_heads, num_splits), float("nan"))
    for x, kv_head in ((x, h) for x in range(len(seqs) * row_blocks) for h in range(num_kv_heads)):
        seq, first_row = seqs.start + x // row_blocks, (x % row_blocks) * DECODE_ROWS  # the kernel's grid
        seq_len, q_start, q_len = seq_lens[seq], qsl[seq], qsl[seq + 1] - qsl[seq]
        first_pos = seq_len - q_len
        lo = max(first_pos + 1 - window, 0) if window > 0 else 0
        per_split = ((seq_len - lo + num_splits - 1) // num_splits + 63) // 64 * 64
        rows = min(q_len * group - first_row, DECODE_ROWS)
        if rows <= 0:
            continue
        f = first_row + torch.arange(DECODE_ROWS)
        tokens, heads = q_start + f // group, kv_head * group + f % group
        pos = first_pos + f // group  # [16] each row's query position
        q = torch.zeros(DECODE_ROWS, d)
        q[:rows] = query[tokens[:rows], heads[:rows]].float()
        for split in range(num_splits):
            key_lo = lo + split * per_split
            key_hi = min(key_lo + per_split, seq_len)
            seen_hi, seen_lo = min(key_hi, first_pos + 1), seq_len - window if window > 0 else 0
            num_tiles = -(-(key_hi - key_lo) // DECODE_KEYS) if key_hi > key_lo else 0
            warps = [Softmax(DECODE_ROWS, d) for _ in range(DECODE_WARPS)]
            for w, state in enumerate(warps):
                for tile in range(w, num_tiles, DECODE_WARPS):
                    key0 = key_lo + tile * DECODE_KEYS
                    keys = key0 + torch.arange(DECODE_KEYS)
                    k = decode_tile_rows(kv_cache[0], block_tables[seq], key0, key_hi, kv_head)
                    v = decode_tile_rows(kv_cache[1], block_tables[seq], key0, key_hi, kv_head)
                    s = (q @ k.T) * (scale * LOG2E)
                    if not (key0 + DECODE_KEYS <= seen_hi and key0 >= seen_lo):
                        hidden = (keys[None, :] >= key_hi) | (keys[None, :] > pos[:, None])
                        if window > 0:
                            hidden |= keys[None, :] <= pos[:, None] - window
                        s = torch.where(hidden, NEG_INF, s)
                    state.update(s, v, kv_cache.dtype)
            row_max = torch.stack([w.m for w in warps]).max(0).values
            base = torch.where(row_max == NEG_INF, 0.0, row_max)
            weights = [torch.exp2(w.m - base) for w in warps]
            total = sum(wt * w.l for wt, w in zip(weights, warps))
            acc = sum(wt[:, None] * w.o for wt, w in zip(weights, warps))
            inv = torch.where(total > 0, 1.0 / total, 0.0)
            result = (acc * inv[:, None])[:rows]
            t, h = tokens[:rows], heads[:rows]
            if num_splits == 1:
                out[t, h] = result.to(out.dtype)
            else:
                part_o[t - token_lo, h, split] = result
                lse = torch.where(total > 0, row_max + torch.log2(torch.where(total > 0, total, 1.0)), NEG_INF)
                part_lse[t - token_lo, h, split] = lse[:rows]
    if num_splits > 1 and num_tokens > 0:
        out[token_lo : token_lo + num_tokens] = reduce_splits(part_o, part_lse, d).to(out.dtype)


def emulate(query, kv_cache, metadata, scale: float, window: int | None, num_splits: int,
            short_query_len: int = 0, packed: bool = False) -> torch.Tensor:
    """What ``flash_attention`` writes for a whole mixed batch (the KV already written); with
    ``short_query_len``, every sequence on the decode kernel; ``packed``: the prefill kernel with
    its rows packed by kv head (the default where a kv head has several q heads)."""
    out = torch.full(query.shape, float("nan"), dtype=query.dtype)
    m, w = metadata, window or 0
    if short_query_len:
        emulate_decode(out, query, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, range(m.num_seqs),
                       short_query_len, scale, w, num_splits)
        return out
    emulate_decode(out, query, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, range(m.num_decodes), 1,
                   scale, w, num_splits)
    emulate_prefill(out, query, kv_cache, m.block_tables, m.query_start_loc, m.seq_lens, m.num_decodes, scale, w,
                    packed)
    return out
