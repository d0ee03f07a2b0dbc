"""A numpy model of one warp's tensor-core instructions, written from the PTX ISA's descriptions,
and of the address math of csrc/attention/flash_common.cuh that feeds them.

Shared memory is a flat array of 16-bit values (held as float64 here); a *fragment* is a list of 32
lanes, each a list of registers, each register a pair (low half, high half). The functions named
like the C++ helpers (``load_a``, ``qk_step``, ``pv_step``, ``probs_to_a``) compute the same lane
addresses as the kernels, so a wrong row, chunk or swizzle shows up as a wrong product.
"""

from __future__ import annotations

import numpy as np

WARP = 32


def swizzle(d: int, row: int, chunk: int) -> int:
    """Element offset of 16-byte chunk ``chunk`` of row ``row`` in a swizzled [rows, d] tile."""
    assert d % 64 == 0
    return row * d + ((chunk ^ (row & 7)) << 3)


def store_swizzled(tile: np.ndarray) -> np.ndarray:
    """The flat shared-memory image of ``tile`` [rows, d] as the cp.async loops write it."""
    rows, d = tile.shape
    smem = np.full(rows * d, np.nan)
    for r in range(rows):
        for c in range(d // 8):
            smem[swizzle(d, r, c) : swizzle(d, r, c) + 8] = tile[r, 8 * c : 8 * c + 8]
    return smem


def ldmatrix_x4(smem: np.ndarray, addresses: list[int], trans: bool = False) -> list[list[tuple]]:
    """``ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16``: lanes 8i..8i+7 address the rows of
    matrix i; register i of lane l gets (row l/4, cols 2(l%4), +1) of matrix i, or with .trans
    (rows 2(l%4), +1 of col l/4)."""
    assert len(addresses) == WARP
    regs: list[list[tuple]] = [[None] * 4 for _ in range(WARP)]  # type: ignore[list-item]
    for i in range(4):
        mat = np.stack([smem[a : a + 8] for a in addresses[8 * i : 8 * i + 8]])  # [8 rows, 8 cols]
        for lane in range(WARP):
            g, t = lane // 4, lane % 4
            regs[lane][i] = (mat[2 * t, g], mat[2 * t + 1, g]) if trans else (mat[g, 2 * t], mat[g, 2 * t + 1])
    return regs


def bank_groups(addresses: list[int]) -> list[set[int]]:
    """The 16-byte bank groups (0..7 of a 128-byte line) each matrix's 8 row addresses hit."""
    return [{(a * 2 // 16) % 8 for a in addresses[8 * i : 8 * i + 8]} for i in range(4)]


def mma_16816(c: list[list[float]], a: list[list[tuple]], b0: list[tuple], b1: list[tuple]) -> None:
    """``mma.sync.aligned.m16n8k16.row.col.f32``: c (16 x 8) += A (16 x 16) B (16 x 8), in place."""
    A, B = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        A[g, 2 * t : 2 * t + 2] = a[lane][0]
        A[g + 8, 2 * t : 2 * t + 2] = a[lane][1]
        A[g, 2 * t + 8 : 2 * t + 10] = a[lane][2]
        A[g + 8, 2 * t + 8 : 2 * t + 10] = a[lane][3]
        B[2 * t : 2 * t + 2, g] = b0[lane]
        B[2 * t + 8 : 2 * t + 10, g] = b1[lane]
    C = A @ B
    for lane in range(WARP):
        g, t = lane // 4, lane % 4
        for e, (row, col) in enumerate([(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]):
            c[lane][e] += C[row, col]


def zeros_c() -> list[list[float]]:
    return [[0.0] * 4 for _ in range(WARP)]


def load_a_addresses(d: int, row0: int, k: int) -> list[int]:
    return [swizzle(d, row0 + (lane & 15), 2 * k + (lane >> 4)) for lane in range(WARP)]


def qk_addresses(d: int, key0: int, k: int) -> list[int]:
    return [swizzle(d, key0 + (lane & 7) + 8 * ((lane >> 3) >> 1), 2 * k + ((lane >> 3) & 1)) for lane in range(WARP)]


def pv_addresses(d: int, key0: int, dp: int) -> list[int]:
    return [swizzle(d, key0 + (lane & 7) + 8 * ((lane >> 3) & 1), 2 * dp + ((lane >> 3) >> 1)) for lane in range(WARP)]


def load_a(smem: np.ndarray, d: int, row0: int, k: int) -> list[list[tuple]]:
    return ldmatrix_x4(smem, load_a_addresses(d, row0, k))


def qk_step(s0, s1, a, k_smem: np.ndarray, d: int, key0: int, k: int) -> None:
    b = ldmatrix_x4(k_smem, qk_addresses(d, key0, k))
    mma_16816(s0, a, [r[0] for r in b], [r[1] for r in b])
    mma_16816(s1, a, [r[2] for r in b], [r[3] for r in b])


def pv_step(o: list, p, v_smem: np.ndarray, d: int, key0: int) -> None:
    for dp in range(d // 16):
        b = ldmatrix_x4(v_smem, pv_addresses(d, key0, dp), trans=True)
        mma_16816(o[2 * dp], p, [r[0] for r in b], [r[1] for r in b])
        mma_16816(o[2 * dp + 1], p, [r[2] for r in b], [r[3] for r in b])


def probs_to_a(lo: list[list[float]], hi: list[list[float]]) -> list[list[tuple]]:
    """The probabilities of score tiles 2k (``lo``) and 2k + 1 (``hi``) as P's A fragment."""
    return [[(lo[l][0], lo[l][1]), (lo[l][2], lo[l][3]), (hi[l][0], hi[l][1]), (hi[l][2], hi[l][3])] for l in range(WARP)]


def c_to_matrix(tiles: list[list[list[float]]]) -> np.ndarray:
    """Accumulator tiles (8 columns each) of one warp as a [16, 8 * len(tiles)] matrix."""
    out = np.full((16, 8 * len(tiles)), np.nan)
    for nt, c in enumerate(tiles):
        for lane in range(WARP):
            g, t = lane // 4, lane % 4
            out[g, 8 * nt + 2 * t : 8 * nt + 2 * t + 2] = c[lane][0:2]
            out[g + 8, 8 * nt + 2 * t : 8 * nt + 2 * t + 2] = c[lane][2:4]
    return out


def frag_offsets(d: int, row0: int) -> list[tuple[int, int, int]]:
    """The prefill kernel's FragAddrs per lane, as element offsets from their tiles: (q, k, v) at step 0."""
    out = []
    for lane in range(WARP):
        i = lane >> 3
        out.append((swizzle(d, row0 + (lane & 15), lane >> 4), swizzle(d, (lane & 7) + 8 * (i >> 1), i & 1),
                    swizzle(d, (lane & 7) + 8 * (i & 1), i >> 1)))
    return out


def frag_addr_bytes(d: int, lane_addr: int, tile_offset: int, step: int, rows16: int) -> int:
    """The prefill kernel's frag_addr: (lane_addr ^ ((step & 3) << 5)) + tile_offset + (step >> 2) * 128
    + rows16 * 32 * d bytes."""
    return (lane_addr ^ ((step & 3) << 5)) + tile_offset + (step >> 2) * 128 + rows16 * 32 * d


def prefill_addresses(d: int, kind: int, row0: int, step: int, rows16: int, tile: int = 0,
                      tile_offset: int = 0) -> list[int]:
    """Element offsets of one prefill ldmatrix from the tile it reads: kind 0 = Q (load_a), 1 = K (qk),
    2 = V (pv). The lane addresses (FragAddrs) point into a tile at ``tile`` bytes (the kernel aligns it
    to 2 * d); the tile read starts ``tile_offset`` bytes (a multiple of 128: a stage, the V tile) later."""
    offsets = frag_offsets(d, row0)
    lane_addrs = [tile + 2 * offsets[lane][kind] for lane in range(WARP)]
    return [(frag_addr_bytes(d, lane_addrs[lane], tile_offset, step, rows16) - tile - tile_offset) // 2
            for lane in range(WARP)]
