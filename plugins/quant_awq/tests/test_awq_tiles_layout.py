"""The tiles layout on CPU: the repack against AutoAWQ's format, and the emulated tensor-core kernel
(tests/tile_emulator.py: the kernel's addressing, bit tricks and reductions, the MMA by PTX's
fragment layouts) against the reference dequantization and float64 products."""

from __future__ import annotations

import pytest
import torch
from awq_quantizer import quantize
from tile_emulator import emulate_dequantize, emulate_gemm

from pagoda_quant_awq.packing import dequantize, unpack_int4
from pagoda_quant_awq.tiles import (
    INPUT_ORDER,
    PERMUTATION,
    AwqTiles,
    a_fragment_coords,
    b_fragment_coords,
    dequantize_tiles,
    nibble_coords,
    physical_input,
    repack,
    tiles_fit,
    unpack_tiles,
)


def _random_awq(k: int, n: int, group: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), dtype=torch.int32, generator=g)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // group, n // 8), dtype=torch.int32, generator=g)
    scales = (torch.rand(k // group, n, generator=g) * 0.02 + 0.001).half()
    return qweight, qzeros, scales


def test_each_lane_word_holds_its_a_fragments() -> None:
    assert sorted(PERMUTATION.reshape(-1).tolist()) == list(range(16 * 64)), "a permutation of the 16 x 64 block"
    for lane in (0, 5, 31):
        g, t = lane >> 2, lane & 3
        for word in range(4):
            for reg in range(4):
                lo, hi = nibble_coords(lane, word, reg), nibble_coords(lane, word, reg + 4)
                # PTX's A fragment (W^T: rows are output columns): column g (+8 for odd registers),
                # inputs 2t (+8 for registers 2, 3); the high half is the next input
                assert lo == (2 * t + 8 * (reg >> 1), 16 * word + g + 8 * (reg & 1))
                column, k = a_fragment_coords(lane, reg, 0)
                assert lo == (k, 16 * word + column)
                assert hi == (lo[0] + 1, lo[1]), "the high half is the next input of the same column"


def test_a_lanes_b_fragments_of_a_pair_of_steps_are_eight_contiguous_inputs() -> None:
    assert sorted(INPUT_ORDER.tolist()) == list(range(32)), "a permutation of the pair's 32 inputs"
    for lane in range(32):
        t = lane & 3
        # b[0..3] of step 0, then of step 1: the order of the uint4 the kernel loads and stages
        inputs = [physical_input(step, b_fragment_coords(lane, e >> 1, e & 1)[0]) for step in range(2) for e in range(4)]
        assert inputs == list(range(8 * t, 8 * t + 8))


@pytest.mark.parametrize("group", [32, 64, 128])
def test_repack_round_trips_and_dequantizes_like_the_reference(group: int) -> None:
    qweight, qzeros, scales = _random_awq(256, 192, group, seed=group)
    tiles = repack(qweight, qzeros, scales, group, torch.float16)
    assert tiles.weights.shape == (3, 16, 32, 4) and tiles.scales.shape == (256 // group, 3, 8, 8)
    q, z, s = unpack_tiles(tiles)
    assert torch.equal(q, unpack_int4(qweight).long()) and torch.equal(z, unpack_int4(qzeros).long())
    assert torch.equal(s, scales)
    # fp16: (q - z) * s has one rounding either way: bit-identical to the reference
    assert torch.equal(dequantize_tiles(tiles), dequantize(qweight, qzeros, scales, group, torch.float16))
    bf16 = repack(qweight, qzeros, scales, group, torch.bfloat16)
    exact = dequantize(qweight, qzeros, scales, group, torch.float64)
    got = dequantize_tiles(bf16).double()  # scale rounded to bf16 first: within 2 bf16 steps
    assert ((got - exact).abs() <= exact.abs() * 2**-7 + 1e-12).all()


def test_repack_of_the_quantizer_matches_its_integers() -> None:
    quant = quantize(torch.randn(128, 64) * 0.1, 32)  # [out 128, in 64]
    tiles = repack(quant.qweight, quant.qzeros, quant.scales, 32, torch.float16)
    q, z, _ = unpack_tiles(tiles)
    assert torch.equal(q, quant.q) and torch.equal(z, quant.zeros)


def test_tiles_fit() -> None:
    assert tiles_fit(4096, 6144, 128) is None
    assert "multiple of 64" in tiles_fit(64, 72, 32)
    assert "multiple of 32" in tiles_fit(64, 64, 16)
    with pytest.raises(ValueError, match="multiple of 64"):
        repack(*_random_awq(64, 72, 32), 32, torch.float16)
    with pytest.raises(ValueError, match="fp16/bf16"):
        repack(*_random_awq(64, 64, 32), 32, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("group", [32, 128])
def test_emulated_dequantize_kernel(dtype: torch.dtype, group: int) -> None:
    tiles = repack(*_random_awq(256, 128, group, seed=3), group, dtype)
    assert torch.equal(emulate_dequantize(tiles), dequantize_tiles(tiles))


def _check_gemm(m: int, k: int, n: int, group: int, dtype: torch.dtype, token_tiles: int, split: int) -> None:
    tiles = repack(*_random_awq(k, n, group, seed=m + split), group, dtype)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
    got = emulate_gemm(x, tiles, token_tiles, split)
    # up to 16 tokens the zero point and scale are applied to fp32 sums (the exact weights); past 16
    # the weights are dequantized to the dtype first (one rounding each), as dequantize_tiles does
    weights = dequantize_tiles(tiles, torch.float64 if token_tiles <= 2 else None).double()
    expected = x.double() @ weights  # [m, n]
    assert got.dtype == dtype and got.shape == (m, n)
    eps = torch.finfo(dtype).eps
    err = (got.double() - expected).abs()
    # fp32 accumulation, one rounding to the dtype: within one step of the dtype (relative to the row)
    bound = expected.abs() * eps + expected.abs().amax(1, keepdim=True) * 1e-5
    assert (err <= bound).all(), f"max error {err.max():.3e}"


@pytest.mark.parametrize("m, k, n, group, token_tiles, split", [
    (1, 256, 128, 128, 1, 1),  # decode, one block (fold path)
    (3, 256, 192, 64, 1, 2),  # three strips (a half-empty column block), K split in two
    (16, 128, 128, 32, 2, 1),  # two token tiles, several groups per warp slice (fold path)
    (5, 512, 64, 32, 1, 3),  # an uneven split (16 groups over 12 slices), a lone strip
    (20, 128, 256, 32, 4, 1),  # NT = 4 (4 x 2 warps, dequantizing path), tokens 20..31 padded
    (40, 128, 256, 64, 4, 2),  # two token blocks sharing the split counters
    (12, 256, 128, 128, 2, 2),  # fold path with a split and a half-empty second token tile
    (16, 1024, 64, 64, 2, 1),  # 16 steps per warp slice: unclamped blocks, then clamped ones (fold path)
    (24, 1024, 128, 128, 4, 1),  # the same past 16 tokens, over two chunks of x
])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_emulated_gemm_vs_float64(m, k, n, group, token_tiles, split, dtype) -> None:
    _check_gemm(m, k, n, group, dtype, token_tiles, split)


def test_emulated_gemm_long_slices_cross_chunks() -> None:
    # K = 1024 in one slice per warp (64 steps / 4 warps = 16 steps, half a chunk of 32) with group 32;
    # then 4096 (64 steps per warp: two chunks), and two token tiles over 2048 (32 steps: two chunks of 16)
    _check_gemm(2, 1024, 128, 32, torch.float16, 1, 1)
    _check_gemm(2, 4096, 64, 128, torch.bfloat16, 1, 1)
    _check_gemm(12, 2048, 64, 64, torch.bfloat16, 2, 1)


def test_awq_tiles_properties() -> None:
    tiles: AwqTiles = repack(*_random_awq(128, 256, 64), 64, torch.bfloat16)
    assert (tiles.k, tiles.n, tiles.dtype, tiles.group_size) == (128, 256, torch.bfloat16, 64)
    assert tiles.locks.shape == (4,) and not tiles.locks.any()
