"""The lane address math of csrc/attention/flash_common.cuh, on a numpy model of ldmatrix and
mma.sync m16n8k16 (tests/flash_fragments.py): Q K^T and P V of one warp equal the matrix products, the
swizzle spreads every ldmatrix over all banks, and the output staging puts each value in its place."""

from __future__ import annotations

import numpy as np
import pytest

from flash_fragments import (
    WARP,
    bank_groups,
    c_to_matrix,
    load_a,
    ldmatrix_x4,
    load_a_addresses,
    probs_to_a,
    pv_addresses,
    mma_16816,
    prefill_addresses,
    pv_step,
    qk_addresses,
    qk_step,
    store_swizzled,
    swizzle,
    zeros_c,
)


@pytest.mark.parametrize("d,keys,row0", [(64, 64, 0), (128, 64, 16), (256, 32, 48)])
def test_qk_and_pv_products_of_one_warp(d: int, keys: int, row0: int) -> None:
    """The prefill tile: warp rows row0..row0+15 of a 64-row Q against `keys` keys (decode: 16)."""
    rng = np.random.default_rng(d + keys)
    q, k, v = rng.standard_normal((64, d)), rng.standard_normal((keys, d)), rng.standard_normal((keys, d))
    q_smem, k_smem, v_smem = store_swizzled(q), store_swizzled(k), store_swizzled(v)

    s = [zeros_c() for _ in range(keys // 8)]
    for kk in range(d // 16):
        a = load_a(q_smem, d, row0, kk)
        for np_ in range(keys // 16):
            qk_step(s[2 * np_], s[2 * np_ + 1], a, k_smem, d, 16 * np_, kk)
    scores = c_to_matrix(s)
    np.testing.assert_allclose(scores, q[row0 : row0 + 16] @ k.T, rtol=1e-12, atol=1e-12)

    o = [zeros_c() for _ in range(d // 8)]
    for kp in range(keys // 16):
        pv_step(o, probs_to_a(s[2 * kp], s[2 * kp + 1]), v_smem, d, 16 * kp)
    np.testing.assert_allclose(c_to_matrix(o), scores @ v, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("d", [64, 128, 256])
def test_every_ldmatrix_hits_all_banks_once(d: int) -> None:
    for addresses in [load_a_addresses(d, 16, 3), qk_addresses(d, 16, 2), pv_addresses(d, 0, 1)]:
        assert all(a % 8 == 0 for a in addresses)  # 16-byte aligned rows
        assert bank_groups(addresses) == [set(range(8))] * 4


@pytest.mark.parametrize("d", [64, 128])
def test_output_staging_round_trip(d: int) -> None:
    """Lanes write (row g or g+8, cols 8dt + 2t, +1) at swizzle(r, dt) + 2t; chunk c of row r is read
    back at swizzle(r, c): the value of column 8c + j lands at column 8c + j."""
    smem = np.full(16 * d, np.nan)
    for lane in range(WARP):
        for half in range(2):
            r = lane // 4 + 8 * half
            for dt in range(d // 8):
                col = 8 * dt + 2 * (lane % 4)
                at = swizzle(d, r, dt) + 2 * (lane % 4)
                smem[at : at + 2] = [r * 1000 + col, r * 1000 + col + 1]
    for r in range(16):
        row = np.concatenate([smem[swizzle(d, r, c) : swizzle(d, r, c) + 8] for c in range(d // 8)])
        np.testing.assert_array_equal(row, r * 1000 + np.arange(d))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_prefill_xor_addresses_equal_the_swizzle(d: int) -> None:
    """The prefill kernel's step-k address is the step-0 address XOR ((k & 3) << 5) plus (k >> 2) * 128
    bytes (tiles aligned to 2 * d bytes; the kernel's shared memory is 1024-byte aligned), then the
    offset of the tile read (stage, V tile: multiples of 128 bytes): the same lanes as load_a, qk_step
    and pv_step, row tiles 16 rows apart."""
    for tile in (0, 2 * d * 64, 1024 * 7):
        for tile_offset in (0, 128 * 3, 2 * 64 * d * 2 + 64 * d * 2):
            for step in range(d // 16):
                for rows16 in range(4):
                    at = (tile, tile_offset)
                    assert prefill_addresses(d, 0, 32, step, rows16, *at) == load_a_addresses(d, 32 + 16 * rows16, step)
                    assert prefill_addresses(d, 1, 0, step, rows16, *at) == qk_addresses(d, 16 * rows16, step)
                    assert prefill_addresses(d, 2, 0, step, rows16, *at) == pv_addresses(d, 16 * rows16, step)


@pytest.mark.parametrize("d,keys,row0", [(64, 64, 0), (128, 64, 96), (256, 32, 64)])
def test_prefill_warp_with_two_row_tiles(d: int, keys: int, row0: int) -> None:
    """One prefill warp's rows row0..row0+31 of a 128-row Q tile (two m16 row tiles) against a K / V
    tile through the XOR addresses, each K and V fragment feeding both row tiles' MMAs."""
    rng = np.random.default_rng(d + row0)
    q, k, v = rng.standard_normal((128, d)), rng.standard_normal((keys, d)), rng.standard_normal((keys, d))
    q_smem, k_smem, v_smem = store_swizzled(q), store_swizzled(k), store_swizzled(v)
    s = [[zeros_c() for _ in range(keys // 8)] for _ in range(2)]
    for kk in range(d // 16):
        a = [ldmatrix_x4(q_smem, prefill_addresses(d, 0, row0, kk, i)) for i in range(2)]
        for np_ in range(keys // 16):
            b = ldmatrix_x4(k_smem, prefill_addresses(d, 1, 0, kk, np_))
            for i in range(2):
                mma_16816(s[i][2 * np_], a[i], [r[0] for r in b], [r[1] for r in b])
                mma_16816(s[i][2 * np_ + 1], a[i], [r[2] for r in b], [r[3] for r in b])
    scores = np.concatenate([c_to_matrix(s[i]) for i in range(2)])
    np.testing.assert_allclose(scores, q[row0 : row0 + 32] @ k.T, rtol=1e-12, atol=1e-12)

    o = [[zeros_c() for _ in range(d // 8)] for _ in range(2)]
    for kp in range(keys // 16):
        p = [probs_to_a(s[i][2 * kp], s[i][2 * kp + 1]) for i in range(2)]
        for dp in range(d // 16):
            b = ldmatrix_x4(v_smem, prefill_addresses(d, 2, 0, dp, kp), trans=True)
            for i in range(2):
                mma_16816(o[i][2 * dp], p[i], [r[0] for r in b], [r[1] for r in b])
                mma_16816(o[i][2 * dp + 1], p[i], [r[2] for r in b], [r[3] for r in b])
    out = np.concatenate([c_to_matrix(o[i]) for i in range(2)])
    np.testing.assert_allclose(out, scores @ v, rtol=1e-10, atol=1e-10)
