"""A CPU emulation of ``csrc/kernels/awq_tiles.cu``: the same grid, warps, lanes, addresses, bit
operations and reductions, written line for line after the kernel (its function names are kept),
so the layout math is proven before any GPU runs it. Each warp walks its slice in the kernel's
unrolled blocks (one group on the fold path, eight steps past 16 tokens), steps past the slice
included, and every address it reads is checked against the tensors (:func:`check_prefetch`).

What is *not* taken from the kernel: the MMA itself. :func:`mma` assembles the A, B and C
matrices from the 32 lanes' registers with the fragment layouts of NVIDIA's PTX ISA
(``pagoda_quant_awq.tiles.{a,b,c}_fragment_coords``, "Matrix Fragments for mma.m16n8k16 with
floating point type") and multiplies them; so a lane holding the wrong values gives a wrong product.
Emulated rounding: dequantization in the 16-bit dtype (round to nearest, as ``__hsub2``/``__hmul2``),
MMA products exact (float64) and accumulated in fp32, the per-group fold as the kernel's fused
multiply-adds (float64, rounded to fp32), fp32 sums in the kernel's order.
"""

from __future__ import annotations

import torch

from pagoda_quant_awq.tiles import (
    MAGIC,
    PAIR,
    STEP,
    STRIP,
    AwqTiles,
    a_fragment_coords,
    b_fragment_coords,
    c_fragment_coords,
    physical_input,
)

THREADS = 256
STAGE_TILES = 128
FRAG_WORDS = 32 * 2
DEPTH = 8
LANE = torch.arange(32)
G, T = LANE >> 2, LANE & 3
ONE = {torch.float16: 0x3C00, torch.bfloat16: 0x3F80}
MAGIC_IN_SUMS = {torch.float16: 1024.0, torch.bfloat16: 128.0}


def tile_shape(nt: int) -> tuple[int, int, int]:
    """(WN, WK, chunk steps) of TileShape<NT>."""
    wn = 2 if nt <= 2 else 4
    wk = THREADS // 32 // wn
    return wn, wk, STAGE_TILES // (wk * nt)


def block_steps(nt: int, spg: int) -> int:
    """U: steps per unrolled block, one group on the fold path (NT <= 2), else whole ring turns."""
    return spg if nt <= 2 else max(DEPTH, spg)


def slice_of(q: int, slices: int, groups: int, spg: int) -> tuple[int, int]:
    g0, g1 = q * groups // slices, (q + 1) * groups // slices
    return g0 * spg, (g1 - g0) * spg


def u32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64) & 0xFFFFFFFF


def halves(bits: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """uint32 pairs -> (low, high) 16-bit values in ``dtype``."""
    def as16(v):
        return torch.where(v >= 0x8000, v - 0x10000, v).to(torch.int16).view(dtype)
    return as16(bits & 0xFFFF), as16(bits >> 16)


def pair_bits(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return (lo.view(torch.int16).to(torch.int64) & 0xFFFF) | ((hi.view(torch.int16).to(torch.int64) & 0xFFFF) << 16)


def byte_perm_half(word: torch.Tensor, high: bool) -> torch.Tensor:
    """__byte_perm(word, 0, 0x3232 or 0x1010): one 16-bit half in both halves."""
    h = (word >> 16) & 0xFFFF if high else word & 0xFFFF
    return h | (h << 16)


def group_constants(scales_words: torch.Tensor, zeros: torch.Tensor, dtype: torch.dtype):
    """scales_words [32, 4] (a lane's uint4), zeros [32] -> (scale2, zero2), each 8 x [32] uint32."""
    scale2, zero2 = [], []
    for j in range(8):
        scale2.append(byte_perm_half(scales_words[:, j >> 1], bool(j & 1)))
        z = ((zeros >> (4 * j)) & 0xF) | MAGIC[dtype]
        zero2.append(z | (z << 16))
    return scale2, zero2


def dequant_pair(word: torch.Tensor, p: int, zero2: torch.Tensor, scale2: torch.Tensor, dtype: torch.dtype):
    v = ((word >> (4 * p)) & 0x000F000F) | (MAGIC[dtype] * 0x00010001)
    out = []
    for a, z, s in zip(halves(v, dtype), halves(zero2, dtype), halves(scale2, dtype)):
        out.append((a - z) * s)  # 16-bit arithmetic, round to nearest (exact difference, one rounding)
    return pair_bits(*out)


def raw_pair(word: torch.Tensor, p: int, dtype: torch.dtype) -> torch.Tensor:
    """The fold path's A register: q + MAGIC (exact), removed with the zero point in the fold."""
    return ((word >> (4 * p)) & 0x000F000F) | (MAGIC[dtype] * 0x00010001)


def fma32(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """fmaf: a * b + c with one rounding to fp32 (the fp32 product is exact in float64)."""
    return (a.double() * b.double() + c.double()).float()


def fold_group(out: torch.Tensor, acc: torch.Tensor, sum_x: torch.Tensor, scales_words: torch.Tensor,
               zeros: torch.Tensor, dtype: torch.dtype) -> None:
    """out/acc [NT, 4 tiles, 32, 4], sum_x [NT, 32, 2] (the staged sums, tokens 2t and 2t + 1 per lane):
    the kernel's fold_group, in place. z + magic is exact in fp32 (zero_in_sums)."""
    for j in range(8):
        s = halves(scales_words[:, j >> 1], dtype)[j & 1].float()
        zm = ((zeros >> (4 * j)) & 0xF).float() + MAGIC_IN_SUMS[dtype]
        for e in range(2):
            i = 2 * (j & 1) + e
            inner = fma32(-zm, sum_x[:, :, e], acc[:, j >> 1, :, i])
            out[:, j >> 1, :, i] = fma32(s, inner, out[:, j >> 1, :, i])
            acc[:, j >> 1, :, i] = 0.0


def _coords(fn, regs: int):
    """[32 lanes, regs, 2 halves] row and column index tensors of a PTX fragment layout."""
    rows = torch.empty(32, regs, 2, dtype=torch.long)
    cols = torch.empty_like(rows)
    for lane in range(32):
        for reg in range(regs):
            for half in range(2):
                rows[lane, reg, half], cols[lane, reg, half] = fn(lane, reg, half)
    return rows, cols


A_ROWS, A_COLS = _coords(a_fragment_coords, 4)
B_ROWS, B_COLS = _coords(b_fragment_coords, 2)
C_ROWS = torch.tensor([[c_fragment_coords(lane, i)[0] for i in range(4)] for lane in range(32)])
C_COLS = torch.tensor([[c_fragment_coords(lane, i)[1] for i in range(4)] for lane in range(32)])


def mma(acc: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> None:
    """acc [32, 4] fp32 += A @ B; a [32, 4] uint32 registers (W^T), b [32, 2] uint32 (x), PTX layouts."""
    A = torch.zeros(16, 16, dtype=torch.float64)
    B = torch.zeros(16, 8, dtype=torch.float64)
    for reg in range(4):
        for half, values in enumerate(halves(a[:, reg], dtype)):
            A[A_ROWS[:, reg, half], A_COLS[:, reg, half]] = values.double()
    for reg in range(2):
        for half, values in enumerate(halves(b[:, reg], dtype)):
            B[B_ROWS[:, reg, half], B_COLS[:, reg, half]] = values.double()
    D = A @ B
    acc += D[C_ROWS, C_COLS].float()


def stage_x(stage: torch.Tensor, sums: torch.Tensor, x_bits: torch.Tensor, m: int, nt_count: int, spg: int,
            chunk: int, split: int, slices: int, groups: int, m_block: int, dtype: torch.dtype) -> None:
    """x_bits [m, K/2] uint32 pairs; fills ``stage`` (flat uint32, a uint4 per lane and pair of steps)
    and, on the fold path, ``sums`` (flat fp32, per warp slice, group of the chunk, token tile and
    token) as the kernel's stage_x: warp (wn, wk) stages CH * NT / WN steps of token tile wn % NT of its slice,
    a lane's B fragments of two steps at once (inputs 8t .. 8t + 7 of the pair), summing each group by
    MMAs against ones."""
    wn_count, wk_count, ch = tile_shape(nt_count)
    stage_steps = ch * nt_count // wn_count
    ones = torch.full((32, 4), ONE[dtype] * 0x00010001, dtype=torch.int64)
    for warp in range(THREADS // 32):
        wn, wk = warp % wn_count, warp // wn_count
        nt, cs0 = wn % nt_count, wn // nt_count * stage_steps
        begin, length = slice_of(split * wk_count + wk, slices, groups, spg)
        rows = (m_block * nt_count + nt) * 8 + G  # per lane
        total = torch.zeros(32, 4, dtype=torch.float32)
        for pair in range(stage_steps // 2):
            local = chunk * ch + cs0 + 2 * pair
            b = torch.zeros(32, 4, dtype=torch.int64)
            if local < length:  # slices are whole pairs of steps
                ok = rows < m
                at = (begin + local) * STEP // 2 + 4 * T  # pairs of inputs 8t .. 8t + 7 of the steps' pair
                for word in range(4):
                    b[ok, word] = x_bits[rows[ok], at[ok] + word]
            dst = ((wk * ch + cs0 + 2 * pair) // 2 * nt_count + nt) * 32 * 4
            stage[dst:dst + 32 * 4] = b.reshape(-1)
            if nt_count > 2:
                continue
            for half in range(2):
                j = 2 * pair + half
                mma(total, ones, b[:, 2 * half:2 * half + 2], dtype)  # column 2t + e of lane (g, t): token 2t + e
                if j % spg == spg - 1:
                    at = ((wk * ch + cs0 + j) // spg * nt_count + nt) * 8
                    sums[at:at + 8] = total[:4, :2].reshape(-1)  # lanes 0..3: tokens 2t, 2t + 1
                    total.zero_()


def warp_blocks(length: int, chunks: int, ch: int, u: int) -> list[tuple[int, int, bool]]:
    """(chunk, first step in the chunk, tail) of every unrolled block a warp runs over a slice of
    ``length`` steps (0 for a strip past N): those starting inside it; tail unless every refill
    (DEPTH steps ahead) stays inside it."""
    return [(c, r, c * ch + r + u + DEPTH > length)
            for c in range(chunks) for r in range(0, ch, u) if c * ch + r < length]


def check_prefetch(strip: int, begin: int, length: int, blocks, n_strips: int, steps: int, spg: int, fold: bool,
                   u: int, ch: int, sizes: tuple[int, int, int]) -> None:
    """Every copy and load a warp issues is unconditional (clamped strip and step in the prologue,
    clamped steps and groups in tail blocks, none elsewhere): each must fall inside the weights,
    scales and zeros, even for a strip past N or an empty slice, and a block run without clamps must
    not need any."""
    strip_in, begin_in, last = min(strip, n_strips - 1), min(begin, steps - spg), max(length - 1, 0)
    steps_read = [min(j, last) for j in range(DEPTH)]
    groups_read = [] if fold else [0]
    for c, r, tail in blocks:
        for j in range(u):
            i = c * ch + r + j
            steps_read.append(min(i + DEPTH, last) if tail else i + DEPTH)
            if j % spg == 0:
                group = i // spg + (0 if fold else 1)
                groups_read.append(min(group, last // spg) if tail else group)
    assert max(steps_read) <= last and max(groups_read, default=0) <= last // spg, "an unclamped read past the slice"
    for at in steps_read:
        w = ((strip_in * steps + begin_in) + at) * 32 + 31
        assert 0 <= w < sizes[0], (strip, begin, length, at)
    for grp in groups_read:
        s = ((begin_in // spg + grp) * n_strips + strip_in) * 8 + 7
        assert 0 <= s < sizes[1] and s < sizes[2], (strip, begin, length, grp)


def plan_token_tiles(m: int) -> int:
    return 1 if m <= 8 else 2 if m <= 16 else 4


def warp_steps(a_acc, out, words, b, consts, dtype, fold: bool) -> None:
    """One step of one warp: the four tiles' MMAs."""
    nt_count = len(b)
    for w in range(4):
        word = words[:, w]
        if fold:
            regs = [raw_pair(word, p, dtype) for p in range(4)]
        else:
            scale2, zero2 = consts
            regs = [dequant_pair(word, p, zero2[2 * w + (p & 1)], scale2[2 * w + (p & 1)], dtype) for p in range(4)]
        a = torch.stack(regs, 1)
        for nt in range(nt_count):
            mma((a_acc if fold else out)[nt, w], a, b[nt], dtype)


def emulate_gemm(x: torch.Tensor, tiles: AwqTiles, token_tiles: int, split: int) -> torch.Tensor:
    """``x`` [m, K] fp16/bf16 -> [m, N] in x's dtype, as launch_awq_tiles_gemm with this plan."""
    dtype = x.dtype
    m, k = x.shape
    n, group = tiles.n, tiles.group_size
    nt_count, fold = token_tiles, token_tiles <= 2
    spg, wn_count, wk_count, ch = group // STEP, *tile_shape(nt_count)
    u = block_steps(nt_count, spg)
    n_strips, steps, groups = n // STRIP, k // STEP, k // group
    weights = u32(tiles.weights).reshape(-1, 4)  # uint4 per (strip, step, lane)
    scales = u32(tiles.scales.view(torch.int16).to(torch.int32) & 0xFFFF).reshape(-1, 2)
    scales = (scales[:, 0] | (scales[:, 1] << 16)).reshape(-1, 4)  # uint4 per (group, strip, g)
    zeros = u32(tiles.zeros).reshape(-1)
    x_bits = pair_bits(x[:, 0::2].contiguous(), x[:, 1::2].contiguous())  # [m, K/2]
    grid = ((m + 8 * nt_count - 1) // (8 * nt_count), (n_strips + wn_count - 1) // wn_count, split)
    out = torch.zeros(m, n, dtype=torch.float32)
    partials = torch.full((split, m, n), float("nan"))
    locks = torch.zeros(n_strips, dtype=torch.int32)
    slices = split * wk_count
    for bz in range(grid[2]):
        for bx in range(grid[0]):
            for by in range(grid[1]):
                longest = max(slice_of(bz * wk_count + w, slices, groups, spg)[1] for w in range(wk_count))
                chunks = (longest + ch - 1) // ch
                stages, chunk_sums = [], []
                for c in range(chunks):  # NaN bits wherever stage_x would leave a value unwritten
                    stages.append(torch.full((STAGE_TILES * FRAG_WORDS,), 0x7FC07FC0, dtype=torch.int64))
                    chunk_sums.append(torch.full((STAGE_TILES // spg * 8,), float("nan")))
                    stage_x(stages[c], chunk_sums[c], x_bits, m, nt_count, spg, c, bz, slices, groups, bx, dtype)
                acc = {}
                for warp in range(THREADS // 32):
                    wn, wk = warp % wn_count, warp // wn_count
                    strip = by * wn_count + wn
                    begin, length = slice_of(bz * wk_count + wk, slices, groups, spg)
                    blocks = warp_blocks(length if strip < n_strips else 0, chunks, ch, u)
                    check_prefetch(strip, begin, length, blocks, n_strips, steps, spg, fold, u, ch,
                                   (len(weights), len(scales), len(zeros)))
                    acc[wn, wk] = warp_out = torch.zeros(nt_count, 4, 32, 4, dtype=torch.float32)
                    a_acc = torch.zeros_like(warp_out)
                    wbase = (strip * steps + begin) * 32 + LANE  # uint4 index per lane, + step * 32
                    sbase = ((begin // spg) * n_strips + strip) * 8 + G
                    last = max(length - 1, 0)
                    for c, r, _ in blocks:
                        frags = stages[c].reshape(-1, 2, 2)  # a uint4 (two steps' uint2) per lane and pair
                        for j in range(u):
                            i = c * ch + r + j  # past the slice (a dequantizing tail block): x is zeros
                            g_index = sbase + min(i // spg, last // spg) * n_strips * 8
                            consts = group_constants(scales[g_index], zeros[g_index], dtype)
                            b = [frags[((wk * ch + r + j) // 2 * nt_count + nt) * 32 + LANE, j % 2]
                                 for nt in range(nt_count)]
                            warp_steps(a_acc, warp_out, weights[wbase + min(i, last) * 32], b, consts, dtype, fold)
                        if fold:  # a block is one group
                            at = (wk * ch + r) // spg * nt_count * 8 + 2 * T
                            sum_x = torch.stack([torch.stack([chunk_sums[c][at + 8 * nt + e] for e in range(2)], 1)
                                                 for nt in range(nt_count)])
                            fold_group(warp_out, a_acc, sum_x, scales[g_index], zeros[g_index], dtype)
                store_block(out, partials, acc, dtype, m, n_strips, (wn_count, wk_count, nt_count), (bx, by, bz), split)
                if split == 1:
                    continue
                locks[by] += 1
                if locks[by] == grid[0] * split:
                    locks[by] = 0
                    col0 = by * wn_count * STRIP
                    cols = min(wn_count * STRIP, n - col0)
                    total = torch.zeros(m, cols, dtype=torch.float32)
                    for s_ in range(split):
                        total += partials[s_, :, col0:col0 + cols]
                    out[:, col0:col0 + cols] = total.to(dtype).float()
    assert int(locks.abs().sum()) == 0, "every lock must be back at zero"
    return out.to(dtype)


def store_block(out, partials, acc, dtype, m, n_strips, shape, block, split) -> None:
    """The slice sums into wk = 0 (w = 1 .. WK - 1 in order), then the C-fragment stores."""
    (wn_count, wk_count, nt_count), (bx, by, bz) = shape, block
    for wn in range(wn_count):
        strip = by * wn_count + wn
        if strip >= n_strips:
            continue
        total = acc[wn, 0].clone()
        for w in range(1, wk_count):
            total += acc[wn, w]
        for nt in range(nt_count):
            for i in range(4):
                rows = (bx * nt_count + nt) * 8 + 2 * T + (i & 1)
                for w in range(4):
                    cols = strip * STRIP + 16 * w + G + 8 * (i >> 1)
                    for lane in range(32):
                        row, col = int(rows[lane]), int(cols[lane])
                        if row >= m:
                            continue
                        value = total[nt, w, lane, i]
                        if split == 1:
                            out[row, col] = value.to(dtype).float()
                        else:
                            partials[bz, row, col] = value


def emulate_dequantize(tiles: AwqTiles) -> torch.Tensor:
    """W [K, N] as awq_tiles_dequantize_kernel writes it (one warp per strip and step)."""
    dtype, group = tiles.dtype, tiles.group_size
    n, k = tiles.n, tiles.k
    n_strips, steps = n // STRIP, k // STEP
    weights = u32(tiles.weights).reshape(-1, 4)
    scales = u32(tiles.scales.view(torch.int16).to(torch.int32) & 0xFFFF).reshape(-1, 2)
    scales = (scales[:, 0] | (scales[:, 1] << 16)).reshape(-1, 4)
    zeros = u32(tiles.zeros).reshape(-1)
    w_out = torch.empty(k, n, dtype=dtype)
    for wid in range(n_strips * steps):
        strip, step = wid // steps, wid % steps
        grp = step * STEP // group
        q = weights[wid * 32 + LANE]
        idx = (grp * n_strips + strip) * 8 + G
        scale2, zero2 = group_constants(scales[idx], zeros[idx], dtype)
        block = torch.empty(STEP, STRIP, dtype=dtype)
        for tile in range(4):
            for pair in range(4):
                j = 2 * tile + (pair & 1)
                lo, hi = halves(dequant_pair(q[:, tile], pair, zero2[j], scale2[j], dtype), dtype)
                row, col = 2 * T + 8 * (pair >> 1), 16 * tile + G + 8 * (pair & 1)
                block[row, col] = lo
                block[row + 1, col] = hi
        rows = [step // 2 * PAIR + physical_input(step % 2, k) for k in range(STEP)]
        w_out[rows, strip * STRIP:(strip + 1) * STRIP] = block
    return w_out
