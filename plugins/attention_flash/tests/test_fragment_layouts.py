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
    load_a_addresses,
    probs_to_a,
    pv_addresses,
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
