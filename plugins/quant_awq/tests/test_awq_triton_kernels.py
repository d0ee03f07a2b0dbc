"""The Triton kernels (under TRITON_INTERPRET=1 on CPU) against the float64 product, on small shapes:
few tokens (split K, fp32 atomics), a whole tile, ragged M and N, every group size and dtype."""

from __future__ import annotations

import pytest
import torch
from awq_quantizer import quantize

triton_kernels = pytest.importorskip("pagoda_quant_awq.triton_kernels")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 2e-2}


def _case(m: int, k: int, n: int, group: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    quant = quantize(torch.randn(n, k, generator=g) * 0.05, group)
    x = torch.randn(m, k, generator=g)
    return quant, x, x.double() @ quant.dequantized(group)  # [m, n] float64


def _rel(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.double().cpu() - expected).abs().max() / expected.abs().max()).item()


@pytest.mark.parametrize("m, k, n, group", [
    (1, 256, 64, 32),  # decode: K split over programs
    (3, 128, 200, 64),  # ragged N (a partial tile of columns)
    (20, 128, 128, 128),  # two row tiles
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gemm_vs_float64(m: int, k: int, n: int, group: int, dtype: torch.dtype) -> None:
    quant, x, expected = _case(m, k, n, group)
    got = triton_kernels.awq_gemm_triton(x.to(DEVICE, dtype), quant.qweight.to(DEVICE), quant.qzeros.to(DEVICE),
                                         quant.scales.to(DEVICE), group)
    assert got.dtype == dtype and got.shape == (m, n)
    assert _rel(got, expected) < TOL[dtype]


def test_split_k_is_used_for_few_tokens() -> None:
    _, _, _, split = triton_kernels.gemm_config(1, 64, 256, 32, torch.device("cpu"))
    assert split > 1  # the decode case above runs the atomic path


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dequantize_kernel_matches_exact_weights(dtype: torch.dtype) -> None:
    quant, _, _ = _case(1, 96, 136, 32, seed=5)
    got = triton_kernels.awq_dequantize_triton(quant.qweight.to(DEVICE), quant.qzeros.to(DEVICE),
                                               quant.scales.to(DEVICE), 32, dtype)
    exact = quant.dequantized(32)
    if dtype == torch.float32 or DEVICE == "cuda":
        assert torch.equal(got.cpu(), exact.to(dtype))  # fp32 product, rounded once
    else:  # the interpreter's bf16 conversion may truncate: within one bf16 step
        assert ((got.double() - exact).abs() <= exact.abs() * 2**-7).all()
