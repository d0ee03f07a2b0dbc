"""The torch reference linear (the CPU path of ``awq``) against a float64 computation."""

from __future__ import annotations

import pytest
import torch
from awq_quantizer import quantize

from pagoda_quant_awq.dispatch import awq_linear
from pagoda_quant_awq.reference import awq_linear_reference


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 3e-3)])
@pytest.mark.parametrize("group", [32, 128])
def test_reference_linear_vs_float64(dtype: torch.dtype, tol: float, group: int) -> None:
    g = torch.Generator().manual_seed(group)
    quant = quantize(torch.randn(72, 256, generator=g) * 0.05, group)
    x = torch.randn(5, 256, generator=g)
    bias = torch.randn(72, generator=g)
    expected = x.double() @ quant.dequantized(group) + bias.double()  # [5, 72]
    got = awq_linear_reference(x.to(dtype), quant.qweight, quant.qzeros, quant.scales, group, bias.to(dtype))
    assert got.dtype == dtype and got.shape == (5, 72)
    err = (got.double() - expected).abs().max() / expected.abs().max()
    assert err < tol, f"relative error {err:.2e}"


def test_cpu_dispatch_uses_the_reference() -> None:
    g = torch.Generator().manual_seed(3)
    quant = quantize(torch.randn(16, 64, generator=g), 32)
    x = torch.randn(3, 64, generator=g)
    got = awq_linear(x, quant.qweight, quant.qzeros, quant.scales, 32)
    torch.testing.assert_close(got.double(), x.double() @ quant.dequantized(32), rtol=1e-5, atol=1e-5)


def test_tiles_layout_choice() -> None:
    from pagoda_quant_awq import dispatch

    assert "NVIDIA GPUs" in dispatch.tiles_reason(torch.device("cpu"), torch.bfloat16, 4096, 4096, 128)
    assert dispatch.choose_kernel(4, torch.device("cuda"), torch.float32) == "triton"  # an unpacked (fp32) layer
    limit, kernel = dispatch.TILES_TABLE[0]
    assert (dispatch.choose_tiles_kernel(1), dispatch.choose_tiles_kernel(limit + 1)) == (kernel, "tiles_dense")
