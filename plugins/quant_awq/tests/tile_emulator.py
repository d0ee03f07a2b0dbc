"""A CPU emulation of ``csrc/kernels/awq_tiles.cu``: the same grid, warps, lanes, addresses, bit
operations and reductions, written line for line after the kernel (its function names are kept),
so the layout math is proven before any GPU runs it.

What is *not* taken from the kernel: the MMA itself. :func:`mma` assembles the A, B and C
matrices from the 32 lanes' registers with the fragment layouts of NVIDIA's PTX ISA
(``pagoda_quant_awq.tiles.{a,b,c}_fragment_coords``, "Matrix Fragments for mma.m16n8k16 with
floating point type") and multiplies them; so a lane holding the wrong values gives a wrong product.
Emulated rounding: dequantization in the 16-bit dtype (round to nearest, as ``__hsub2``/``__hmul2``),
MMA products exact (float64) and accumulated in fp32, fp32 sums in the kernel's order.
"""

from __future__ import annotations

import torch

from pagoda_quant_awq.tiles import MAGIC, STEP, STRIP, AwqTiles, a_fragment_coords, b_fragment_coords, c_fragment_coords

THREADS = 256
STAGE_STEPS = 64
FRAG_WORDS = 32 * 4
LANE = torch.arange(32)
G, T = LANE >> 2, LANE & 3


def depth(spg: int) -> int:
    return 8 if spg >= 8 else 4


def tile_shape(mt: int) -> tuple[int, int, int]:
    """(WN, WK, chunk steps) of TileShape<MT>."""
    wn = 2 if mt == 1 else 4
    wk = THREADS // 32 // wn
    return wn, wk, STAGE_STEPS // (wk * mt)


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


def mma(acc: torch.Tensor, a: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor, dtype: torch.dtype) -> None:
    """acc [32, 4] fp32 += A @ B; a [32, 4] uint32 registers, b0/b1 [32] uint32 (PTX layouts)."""
    A = torch.zeros(16, 16, dtype=torch.float64)
    B = torch.zeros(16, 8, dtype=torch.float64)
    for reg in range(4):
        for half, values in enumerate(halves(a[:, reg], dtype)):
            A[A_ROWS[:, reg, half], A_COLS[:, reg, half]] = values.double()
    for reg, b in enumerate((b0, b1)):
        for half, values in enumerate(halves(b, dtype)):
            B[B_ROWS[:, reg, half], B_COLS[:, reg, half]] = values.double()
    D = A @ B
    acc += D[C_ROWS, C_COLS].float()


def stage_x(stage: torch.Tensor, x_bits: torch.Tensor, m: int, mt_count: int, spg: int, chunk: int, split: int,
            slices: int, groups: int, m_block: int) -> None:
    """x_bits [m, K/2] uint32 pairs; fills ``stage`` (flat uint32) as the kernel's stage_x."""
    wn, wk_count, ch = tile_shape(mt_count)
    items = wk_count * ch * mt_count * 32
    for item in range(items):
        h, r = item & 1, (item >> 1) & 15
        rest = item >> 5
        mt = rest % mt_count
        rest //= mt_count
        cs, wk = rest % ch, rest // ch
        begin, length = slice_of(split * wk_count + wk, slices, groups, spg)
        local = chunk * ch + cs
        row = (m_block * mt_count + mt) * 16 + r
        if row >= m:
            continue  # never written: zero from the kernel's start
        v = [0, 0, 0, 0]
        if local < length:
            col_pair = ((begin + local) * STEP + 8 * h) // 2
            v = x_bits[row, col_pair:col_pair + 4].tolist()
        dst = ((wk * ch + cs) * mt_count + mt) * FRAG_WORDS + 4 * (4 * (r & 7)) + (r >> 3) + 2 * h
        for e in range(4):
            stage[dst + 4 * e] = v[e]


def check_prefetch(strip: int, begin: int, length: int, walked: int, n_strips: int, steps: int, spg: int,
                   depth_: int, sizes: tuple[int, int, int]) -> None:
    """Every load a warp issues is unconditional (clamped strip and step, see the kernel's prologue
    and refill): each must fall inside the weights, scales and zeros, even for a strip past N or an
    empty slice."""
    strip_in, begin_in, last = min(strip, n_strips - 1), min(begin, steps - spg), max(length - 1, 0)
    issued = [min(j, last) for j in range(depth_)] + [min(i + depth_, last) for i in range(walked)]
    for at in issued:
        w = ((strip_in * steps + begin_in) + at) * 32 + 31
        s = ((begin_in // spg + at // spg) * n_strips + strip_in) * 8 + 7
        assert 0 <= w < sizes[0] and 0 <= s < sizes[1] and s < sizes[2], (strip, begin, length, at)


def emulate_gemm(x: torch.Tensor, tiles: AwqTiles, m_tiles: int, split: int) -> torch.Tensor:
    """``x`` [m, K] fp16/bf16 -> [m, N] in x's dtype, as launch_awq_tiles_gemm with this plan."""
    dtype = x.dtype
    m, k = x.shape
    n, group = tiles.n, tiles.group_size
    spg, wn_count, wk_count, ch = group // STEP, *tile_shape(m_tiles)
    D = depth(spg)
    n_strips, steps, groups = n // STRIP, k // STEP, k // group
    weights = u32(tiles.weights).reshape(-1, 4)  # uint4 per (strip, step, lane)
    scales = u32(tiles.scales.view(torch.int16).to(torch.int32) & 0xFFFF).reshape(-1, 2)
    scales = (scales[:, 0] | (scales[:, 1] << 16)).reshape(-1, 4)  # uint4 per (group, strip, g)
    zeros = u32(tiles.zeros).reshape(-1)
    x_bits = pair_bits(x[:, 0::2].contiguous(), x[:, 1::2].contiguous())  # [m, K/2]
    grid = ((m + 16 * m_tiles - 1) // (16 * m_tiles), (n_strips + wn_count - 1) // wn_count, split)
    out = torch.zeros(m, n, dtype=torch.float32)
    partials = torch.full((split, m, n), float("nan"))
    locks = torch.zeros(n_strips, dtype=torch.int32)
    slices = split * wk_count
    for bz in range(grid[2]):
        for bx in range(grid[0]):
            for by in range(grid[1]):
                acc = {}
                longest = max(slice_of(bz * wk_count + w, slices, groups, spg)[1] for w in range(wk_count))
                chunks = (longest + ch - 1) // ch
                stages = []
                stage = torch.zeros(STAGE_STEPS * FRAG_WORDS, dtype=torch.int64)  # zeroed once per block
                for c in range(chunks):
                    stage = stage.clone()  # the kernel overwrites the previous chunk in place
                    stage_x(stage, x_bits, m, m_tiles, spg, c, bz, slices, groups, bx)
                    stages.append(stage)
                for warp in range(THREADS // 32):
                    wn, wk = warp % wn_count, warp // wn_count
                    strip = by * wn_count + wn
                    a_acc = torch.zeros(m_tiles, 8, 32, 4, dtype=torch.float32)
                    acc[wn, wk] = a_acc
                    begin, length = slice_of(bz * wk_count + wk, slices, groups, spg)
                    check_prefetch(strip, begin, length, chunks * ch, n_strips, steps, spg, D,
                                   (len(weights), len(scales), len(zeros)))
                    if strip >= n_strips:
                        continue
                    wbase = (strip * steps + begin) * 32 + LANE  # uint4 index per lane, + step * 32
                    group0 = begin // spg
                    sbase = (group0 * n_strips + strip) * 8 + G
                    for c in range(chunks):
                        frags = stages[c].reshape(-1, 4)  # uint4 view
                        for r in range(0, ch, D):
                            for j in range(D):
                                i = c * ch + r + j
                                if i >= length:
                                    continue
                                if j % spg == 0:
                                    g_index = sbase + (i // spg) * n_strips * 8
                                    scale2, zero2 = group_constants(scales[g_index], zeros[g_index], dtype)
                                a = [frags[wk * ch * m_tiles * 32 + ((r + j) * m_tiles + mt) * 32 + LANE]
                                     for mt in range(m_tiles)]
                                wbuf = weights[wbase + i * 32]  # [32, 4]
                                for w in range(4):
                                    word = wbuf[:, w]
                                    for half in range(2):
                                        tile = 2 * w + half
                                        b0 = dequant_pair(word, 2 * half, zero2[tile], scale2[tile], dtype)
                                        b1 = dequant_pair(word, 2 * half + 1, zero2[tile], scale2[tile], dtype)
                                        for mt in range(m_tiles):
                                            mma(a_acc[mt, tile], a[mt], b0, b1, dtype)
                # slice sums into wk = 0, in order w = 1 .. WK - 1, then the C-fragment stores
                for wn in range(wn_count):
                    strip = by * wn_count + wn
                    if strip >= n_strips:
                        continue
                    total = acc[wn, 0].clone()
                    for w in range(1, wk_count):
                        total += acc[wn, w]
                    for mt in range(m_tiles):
                        for j in range(8):
                            for hr in range(2):
                                rows = (bx * m_tiles + mt) * 16 + G + 8 * hr
                                cols = strip * STRIP + 8 * j + 2 * T
                                for lane in range(32):
                                    row, col = int(rows[lane]), int(cols[lane])
                                    if row >= m:
                                        continue
                                    pair = total[mt, j, lane, 2 * hr:2 * hr + 2]
                                    if split == 1:
                                        out[row, col:col + 2] = pair.to(dtype).float()
                                    else:
                                        partials[bz, row, col:col + 2] = pair
                if split == 1:
                    continue
                locks[by] += 1
                if locks[by] == grid[0] * split:
                    locks[by] = 0
                    col0 = by * wn_count * STRIP
                    cols = min(wn_count * STRIP, n - col0)
                    total = torch.zeros(m, cols, dtype=torch.float32)
                    for s in range(split):
                        total += partials[s, :, col0:col0 + cols]
                    out[:, col0:col0 + cols] = total.to(dtype).float()
    assert int(locks.abs().sum()) == 0, "every lock must be back at zero"
    return out.to(dtype)


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
        for word in range(4):
            for pair in range(4):
                tile, reg = 2 * word + (pair >> 1), pair & 1
                v = dequant_pair(q[:, word], pair, zero2[tile], scale2[tile], dtype)
                lo, hi = halves(v, dtype)
                block[2 * T + 8 * reg, 8 * tile + G] = lo
                block[2 * T + 8 * reg + 1, 8 * tile + G] = hi
        w_out[step * STEP:(step + 1) * STEP, strip * STRIP:(strip + 1) * STRIP] = block
    return w_out
