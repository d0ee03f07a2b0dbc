"""FP8 e4m3 quantize/dequantize round trips against the format's error bounds."""

from __future__ import annotations

import pytest
import torch

from pagoda_quant_fp8.fp8_math import (
    FP8_DTYPE, FP8_MAX, dequantize, dequantize_blocks, quantize_blocks, quantize_per_row, quantize_per_tensor,
    quantize_with_scale,
)

HALF_ULP = 2.0**-4  # e4m3: 3 mantissa bits, round to nearest -> relative error <= 2^-4 for normals
SUBNORMAL_STEP = 2.0**-9  # spacing of e4m3 values below 2^-6, in units of the scale


def _bound(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Largest rounding error of each element: relative for normals, half a subnormal step below."""
    return torch.maximum(x.abs() * HALF_ULP, scale * SUBNORMAL_STEP / 2) * (1 + 1e-6)


def _data(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    x[0, :4] = torch.tensor([0.0, 1e-9, -3e-5, 50.0])  # zero, tiny (subnormal/flush) and a row outlier
    return x * torch.logspace(-3, 2, shape[0], dtype=torch.float64)[:, None]  # rows of very different ranges


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_round_trip_within_e4m3_bounds(granularity: str) -> None:
    x = _data(64, 96)
    q, scale = quantize_per_tensor(x) if granularity == "tensor" else quantize_per_row(x)
    assert q.dtype == FP8_DTYPE and scale.dtype == torch.float32
    assert scale.shape == (() if granularity == "tensor" else (64, 1))
    amax = x.abs().amax() if granularity == "tensor" else x.abs().amax(dim=1, keepdim=True)
    torch.testing.assert_close(scale.double(), amax / FP8_MAX, rtol=1e-6, atol=0)  # amax maps to 448
    back = dequantize(q, scale, torch.float64)
    err = (back - x).abs()
    assert bool((err <= _bound(x, scale.double())).all()), float((err / _bound(x, scale.double())).max())
    assert float(q.float().abs().max()) == FP8_MAX
    # quantizing the dequantized values with the same scale reproduces the same bits
    again = quantize_with_scale(back, scale)
    assert torch.equal(again.view(torch.uint8), q.view(torch.uint8))


def test_per_row_is_far_more_accurate_on_rows_of_different_ranges() -> None:
    x = _data(64, 96)

    def small_rows_error(q: torch.Tensor, scale: torch.Tensor) -> float:
        """Median relative error over the rows of smallest range (subnormal or zero per tensor)."""
        rel = (dequantize(q, scale, torch.float64) - x).abs() / x.abs().clamp(min=1e-30)
        return float(rel[1:16].median())

    assert small_rows_error(*quantize_per_row(x)) < HALF_ULP < small_rows_error(*quantize_per_tensor(x))


def test_static_scale_saturates_and_zero_rows_are_safe() -> None:
    x = torch.tensor([[1000.0, -1000.0, 1.0], [0.0, 0.0, 0.0]])
    q = quantize_with_scale(x, torch.tensor(1.0))
    assert q.float()[0].tolist() == [FP8_MAX, -FP8_MAX, 1.0]  # saturated, never NaN
    q_rows, s_rows = quantize_per_row(x)
    assert torch.isfinite(s_rows).all() and float(s_rows[1]) > 0
    assert q_rows.float()[1].abs().sum() == 0


@pytest.mark.parametrize("shape,block", [((64, 96), (16, 32)), ((40, 50), (16, 16))])  # whole and ragged blocks
def test_block_round_trip(shape: tuple[int, int], block: tuple[int, int]) -> None:
    x = _data(*shape)[:, : shape[1]]
    q, scale = quantize_blocks(x, block)
    assert scale.shape == (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    back = dequantize_blocks(q, scale, block).double()
    full = scale.double().repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[: shape[0], : shape[1]]
    assert bool(((back - x).abs() <= _bound(x, full)).all())
