"""The FP8 linear (reference path and torch._scaled_mm, which torch also runs on CPU) against float64."""

from __future__ import annotations

import pytest
import torch

from pagoda.layers.linear import Linear, MergedLinear, QKVLinear
from pagoda_quant_fp8.fp8_math import FP8_DTYPE, dequantize, quantize_per_row, quantize_per_tensor
from pagoda_quant_fp8.method import Fp8Method
from scaled_mm_support import needs_cpu_rowwise_scaled_mm

U = 2.0**-4  # e4m3 relative rounding error bound (normals)


def _layer(method, k: int, n: int, bias: bool = False, seed: int = 0, device: str = "cpu") -> tuple[Linear, torch.Tensor]:
    """An online-quantized (float checkpoint) layer on ``device``; returns it and its float weight [n, k]."""
    g = torch.Generator().manual_seed(seed)
    with torch.device(device):
        layer = Linear(k, n, bias=bias, quant_method=method, dtype=torch.float32)
    w = torch.randn(n, k, generator=g) * torch.logspace(-2, 0, n)[:, None]  # channels of different ranges
    layer.weight.data.copy_(w)
    if bias:
        layer.bias.data.copy_(torch.randn(n, generator=g))
    layer.process_weights_after_loading()
    return layer, w


def _x(m: int, k: int, seed: int = 1, device: str = "cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * torch.logspace(-1, 1, m)[:, None]).to(device)  # tokens of different ranges


@pytest.mark.parametrize("bias", [False, True])
def test_reference_linear_within_e4m3_bounds_of_float64(bias: bool) -> None:
    layer, w = _layer(Fp8Method(None, backend="reference"), 128, 48, bias)
    assert layer.weight.dtype == FP8_DTYPE and layer.weight_scale.shape == (1, 48) and layer.fp8_rowwise
    x = _x(20, 128)
    y = layer(x)
    exact = x.double() @ w.double().t() + (layer.bias.double() if bias else 0)
    # |x_q w_q - x w| <= |x||w| ((1+u)^2 - 1) per product (no subnormals at these ranges)
    bound = (x.double().abs() @ w.double().abs().t()) * ((1 + U) ** 2 - 1) + 1e-5
    assert y.dtype == torch.float32 and bool(((y.double() - exact).abs() <= bound).all())
    # and the error is exactly the rounding of the operands: float64 product of the FP8 values
    xq, xs = quantize_per_row(x)
    emulated = dequantize(xq, xs, torch.float64) @ dequantize(layer.weight.data, layer.weight_scale.data.t(),
                                                                torch.float64).t()
    torch.testing.assert_close(y.double(), emulated + (layer.bias.double() if bias else 0), rtol=1e-5, atol=1e-5)
    assert float((y.double() - exact).norm() / exact.norm()) < 0.05  # typical error far below the bound


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("activation", ["token", "tensor", "static"])
@needs_cpu_rowwise_scaled_mm
def test_scaled_mm_matches_the_reference(dtype: torch.dtype, activation: str) -> None:
    """torch._scaled_mm (the engine's kernel) == the reference path, for each activation scheme."""
    from pagoda_quant_fp8.scheme import Fp8Scheme

    outs = []
    for backend in ("reference", "torch"):
        method = Fp8Method(None, backend=backend)
        method.scheme = Fp8Scheme("test", "tensor", activation)
        layer = Linear(64, 32, bias=True, quant_method=method, dtype=dtype)
        w, s = quantize_per_tensor(torch.randn(32, 64, generator=torch.Generator().manual_seed(3)))
        layer.weight.data.copy_(w)
        layer.weight_scale.data.fill_(float(s))
        layer.bias.data.normal_(generator=torch.Generator().manual_seed(4))
        if activation == "static":
            layer.input_scale.data.fill_(0.01)
        layer.process_weights_after_loading()
        assert layer.fp8_rowwise == (activation == "token")
        outs.append(layer(_x(9, 64).to(dtype)))
    assert outs[1].dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(outs[1], outs[0], rtol=tol, atol=tol)


@pytest.mark.parametrize("equal", [True, False])
def test_fused_shards_keep_their_per_tensor_scales(equal: bool) -> None:
    """qkv loads one scale per shard: equal ones stay tensor-wise, different ones become per channel."""
    from pagoda_quant_fp8.scheme import parse_scheme

    method = Fp8Method({"quant_method": "fp8", "activation_scheme": "static"}, backend="reference")
    layer = QKVLinear(32, 16, 2, 1, bias=False, quant_method=method, dtype=torch.float32)  # q 32, k 16, v 16
    assert method.scheme == parse_scheme({"quant_method": "fp8", "activation_scheme": "static"})
    g = torch.Generator().manual_seed(5)
    dense = {}
    for i, shard in enumerate("qkv"):
        w = torch.randn(layer.output_sizes[i], 32, generator=g) * (1 if equal else 3.0**i)
        q, s = quantize_per_tensor(w)
        s = torch.tensor(0.01) if equal else s
        q = (w / s).clamp(-448, 448).to(FP8_DTYPE)
        layer.load_weight("weight", q, shard)
        layer.load_weight("weight_scale", s.reshape(1), shard)  # a one-element scale: [] or [1]
        layer.load_weight("input_scale", torch.tensor(0.02 + 0.01 * i), shard)
        dense[shard] = q.float() * s
    layer.process_weights_after_loading()
    assert layer.fp8_rowwise != equal and float(layer.input_scale) == pytest.approx(0.04)  # the max of the shards
    x = _x(5, 32) * 0.3
    xq = (x / 0.04).clamp(-448, 448).to(FP8_DTYPE).float() * 0.04
    expected = xq.double() @ torch.cat([dense[s] for s in "qkv"]).double().t()
    torch.testing.assert_close(layer(x).double(), expected, rtol=1e-5, atol=1e-5)


def test_gate_up_per_channel_shards() -> None:
    """compressed-tensors channel scales ([N, 1] per shard) land in their slice of the fused layer."""
    config = {"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}}
    layer = MergedLinear(32, {"gate": 16, "up": 16}, bias=False, quant_method=Fp8Method(config, "reference"),
                         dtype=torch.float32)
    ws = []
    for shard in ("gate", "up"):
        w = torch.randn(16, 32, generator=torch.Generator().manual_seed(len(ws)))
        q, s = quantize_per_row(w)
        layer.load_weight("weight", q, shard)
        layer.load_weight("weight_scale", s, shard)
        ws.append(dequantize(q, s))
    layer.process_weights_after_loading()
    x = _x(3, 32)
    xq, xs = quantize_per_row(x)
    torch.testing.assert_close(layer(x), dequantize(xq, xs) @ torch.cat(ws).t(), rtol=1e-5, atol=1e-5)


def test_scaled_mm_alignment_is_checked_at_load() -> None:
    from pagoda.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="multiples of 16"):
        _layer(Fp8Method(None, backend="torch"), 40, 24)
