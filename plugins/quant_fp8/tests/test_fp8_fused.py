"""The FP8 quantization fused into RMSNorm and SiLU-and-mul (Triton; the interpreter on CPU, the
device on a GPU) against the unfused ops followed by the per-token quantizer, and inside a model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from pagoda.layers.linear import LinearBase
from pagoda.interfaces.ops import CustomOps
from pagoda_quant_fp8.fp8_math import quantize_per_row
from pagoda_quant_fp8.input_quant import FusedTokenQuantizer, TokenQuantizer, close_in_fp8, fused_or_plain

triton = pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPS = CustomOps()
FUSED, PLAIN = FusedTokenQuantizer(quantize_per_row), TokenQuantizer(quantize_per_row)
# Triton 3.9's interpreter truncates float32 -> bfloat16 (half the values a step off), so bfloat16
# runs on the GPU only; float16 and float32 round correctly there.
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if DEVICE == "cuda" else [])
PROBE_DTYPE = torch.bfloat16 if DEVICE == "cuda" else torch.float16


def _rows(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.logspace(-2, 1, m).view(m, 1)  # rows of different scales
    return x.to(DEVICE, dtype)


def _assert_fp8_close(a, b, dtype: torch.dtype) -> None:
    assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and a.dtype == b.dtype == dtype
    assert close_in_fp8(a, b)
    flipped = (a.data.float() != b.data.float()).float().mean().item()
    assert flipped < 0.01, f"{flipped:.2%} of the FP8 values differ by a rounding step"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k", [(1, 64), (5, 1000), (3, 4096)])
def test_rms_norm_quant_equals_norm_then_quantize(dtype: torch.dtype, m: int, k: int) -> None:
    x, res = _rows(m, k, dtype, 1), _rows(m, k, dtype, 2)
    w = (1 + 0.1 * _rows(1, k, torch.float32, 3)[0]).to(dtype)
    _assert_fp8_close(FUSED.rms_norm(OPS, x, w, 1e-6), PLAIN.rms_norm(OPS, x, w, 1e-6), dtype)
    fused, fused_res = FUSED.fused_add_rms_norm(OPS, x, res, w, 1e-6)
    plain, plain_res = PLAIN.fused_add_rms_norm(OPS, x, res, w, 1e-6)
    _assert_fp8_close(fused, plain, dtype)
    assert torch.equal(fused_res, plain_res)  # the residual stream is rounded exactly like the unfused add


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,d", [(1, 48), (4, 1000), (2, 14336)])
def test_silu_mul_quant_equals_activation_then_quantize(dtype: torch.dtype, m: int, d: int) -> None:
    x = _rows(m, 2 * d, dtype, 4)
    _assert_fp8_close(FUSED.silu_and_mul(OPS, x), PLAIN.silu_and_mul(OPS, x), dtype)


def test_zero_rows_and_non_contiguous_inputs() -> None:
    x = torch.zeros(2, 256, dtype=PROBE_DTYPE, device=DEVICE)
    out = FUSED.silu_and_mul(OPS, x)
    assert torch.equal(out.data.float(), torch.zeros(2, 128, device=DEVICE)) and bool((out.scale > 0).all())
    wide = _rows(3, 512, PROBE_DTYPE, 5)[:, :256]  # a column slice: row stride 512
    w = torch.ones(256, dtype=PROBE_DTYPE, device=DEVICE)
    _assert_fp8_close(FUSED.rms_norm(OPS, wide, w, 1e-6), PLAIN.rms_norm(OPS, wide, w, 1e-6), PROBE_DTYPE)


def test_probe_picks_the_fused_kernels_and_falls_back_when_they_are_wrong(monkeypatch, caplog) -> None:
    assert isinstance(fused_or_plain(quantize_per_row, DEVICE, PROBE_DTYPE), FusedTokenQuantizer)
    from pagoda_quant_fp8 import triton_fused

    real = triton_fused.silu_mul_quant
    monkeypatch.setattr(triton_fused, "silu_mul_quant", lambda x, fmt: (real(x, fmt)[0], real(x, fmt)[1] * 2))  # wrong scales
    with caplog.at_level(logging.WARNING, logger="pagoda"):
        chosen = fused_or_plain(quantize_per_row, DEVICE, PROBE_DTYPE)
    assert type(chosen) is TokenQuantizer
    assert "SiLU-and-mul differs from the unfused ops" in caplog.text


@pytest.mark.skipif(DEVICE != "cpu", reason="the CPU model path (reference matmul)")
def test_tiny_fp8_llama_with_fused_producers_generates_like_unfused(tmp_path: Path) -> None:
    from test_fp8_checkpoints import PROMPTS, greedy, load_fp8

    from hf_tiny import hf_config, hf_model

    hf_model(hf_config("llama")).save_pretrained(tmp_path)
    runs = []
    for quantizer in (PLAIN, FUSED):
        model, ctx = load_fp8(tmp_path)  # online FP8 of a float checkpoint: per-token activations
        layers = [m for m in model.modules() if isinstance(m, LinearBase) and m.input_quantizer is not None]
        assert len(layers) == 4 * len(model.model.layers)  # qkv, o, gate_up, down
        for layer in layers:
            layer.input_quantizer = quantizer
        runs.append([greedy(model, ctx, p, steps=4) for p in PROMPTS])
    for (tokens, logits), (fused_tokens, fused_logits) in zip(*runs):
        assert fused_tokens == tokens
        torch.testing.assert_close(fused_logits, logits, rtol=0, atol=2e-3)
