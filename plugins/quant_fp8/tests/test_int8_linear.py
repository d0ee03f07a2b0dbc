"""The INT8 W8A8 linear against float64: within int8 rounding bounds, equal to the float64 product of the
dequantized operands; ``torch._int_mm`` and the Triton kernel (interpreter on CPU) give the same outputs; the
per-token quantization fused into RMSNorm / SiLU-and-mul equals the unfused ops to one int8 step."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.ops import CustomOps
from pagoda.layers.linear import Linear, MergedLinear, QKVLinear
from pagoda_quant_fp8.fp8_math import dequantize
from pagoda_quant_fp8.int8_math import quantize_per_row, quantize_per_tensor
from pagoda_quant_fp8.int8_method import Int8Method
from pagoda_quant_fp8.scheme import Fp8Scheme
import test_fp8_linear as fp8_linear

triton = pytest.importorskip("triton")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _layer(method: Int8Method, k: int, n: int, bias: bool = False, seed: int = 0) -> tuple[Linear, torch.Tensor]:
    return fp8_linear._layer(method, k, n, bias, seed, DEVICE)


def _x(m: int, k: int, seed: int = 1) -> torch.Tensor:
    return fp8_linear._x(m, k, seed, DEVICE)


@pytest.mark.parametrize("backend", ["reference", "torch", "triton"])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_within_int8_bounds_of_float64(backend: str, bias: bool) -> None:
    layer, w = _layer(Int8Method(None, backend=backend), 128, 48, bias)
    assert layer.weight.dtype == torch.int8 and layer.weight_scale.shape == (1, 48)
    x = _x(20, 128)
    y = layer(x).double().cpu()
    x64, w64 = x.double().cpu(), w.double()
    b64 = layer.bias.double().cpu() if bias else 0
    # |x_q w_q - x w| <= sum_k |x| dw + |w| dx + dx dw, with dx = s_x / 2 per token and dw = s_w / 2 per channel
    dx = x64.abs().amax(1, keepdim=True) / 254
    dw = w64.abs().amax(1, keepdim=True).t() / 254
    bound = (x64.abs().sum(1, keepdim=True) * dw + dx * w64.abs().sum(1)[None, :] + 128 * dx * dw) * 1.001 + 1e-5
    exact = x64 @ w64.t() + b64
    assert bool(((y - exact).abs() <= bound).all())
    xq, xs = quantize_per_row(x.cpu())
    emulated = dequantize(xq, xs, torch.float64) @ dequantize(layer.weight.data.cpu(), layer.weight_scale.data.cpu().t(),
                                                                torch.float64).t() + b64
    torch.testing.assert_close(y, emulated, rtol=1e-5, atol=1e-5)  # the error is the operands' rounding alone
    assert float((y - exact).norm() / exact.norm()) < 0.02


@pytest.mark.parametrize("m,k,n", [(1, 256, 64), (5, 200, 48), (20, 384, 136), (150, 256, 96)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int_mm_and_the_triton_kernel_agree(m: int, k: int, n: int, dtype: torch.dtype) -> None:
    """Both sum int8 products exactly in int32 and scale in float32 in the same order."""
    from pagoda_quant_fp8.int8_method import int_mm
    from pagoda_quant_fp8.triton_int8 import int8_scaled_mm

    g = torch.Generator().manual_seed(m + k)
    xq, xs = quantize_per_row(torch.randn(m, k, generator=g))
    wq, ws = quantize_per_row(torch.randn(n, k, generator=g))
    args = [t.to(DEVICE) for t in (xq, xs, wq, ws.view(1, -1))]
    triton_out = int8_scaled_mm(*args, dtype)
    assert triton_out.dtype == dtype
    if DEVICE == "cpu" or m > 16:  # torch._int_mm on CUDA pads small batches
        # Triton 3.9's interpreter truncates float32 -> bfloat16 (a step off where torch rounds up)
        step = 2.0**-7 if dtype == torch.bfloat16 and DEVICE == "cpu" else 0.0
        torch.testing.assert_close(triton_out, int_mm(*args, dtype), rtol=step, atol=0)
    exact = (xq.double() @ wq.double().t()) * xs.double() * ws.double().view(1, -1)
    torch.testing.assert_close(triton_out.double().cpu(), exact, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6,
                               atol=1e-5)


@pytest.mark.parametrize("activation", ["token", "tensor", "static"])
def test_activation_schemes_match_the_reference(activation: str) -> None:
    outs = []
    for backend in ("reference", "torch", "triton"):
        method = Int8Method(None, backend=backend)
        method.scheme = Fp8Scheme("test", "tensor", activation)
        with torch.device(DEVICE):
            layer = Linear(64, 32, bias=True, quant_method=method, dtype=torch.float32)
        w, s = quantize_per_tensor(torch.randn(32, 64, generator=torch.Generator().manual_seed(3)))
        layer.weight.data.copy_(w)
        layer.weight_scale.data.fill_(float(s))
        layer.bias.data.normal_(generator=torch.Generator().manual_seed(4))
        if activation == "static":
            layer.input_scale.data.fill_(0.05)
        layer.process_weights_after_loading()
        outs.append(layer(_x(9, 64)))
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(outs[2], outs[1], rtol=0, atol=0)


def test_fused_shards_with_per_tensor_scales_become_per_channel() -> None:
    """qkv loads one scale per shard; different ones are expanded per output channel (exact)."""
    config = {"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "tensor", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": False}}}}
    method = Int8Method(config, backend="reference")
    layer = QKVLinear(32, 16, 2, 1, bias=False, quant_method=method, dtype=torch.float32)  # q 32, k 16, v 16
    g = torch.Generator().manual_seed(5)
    dense = {}
    for i, shard in enumerate("qkv"):
        q, s = quantize_per_tensor(torch.randn(layer.output_sizes[i], 32, generator=g) * 3.0**i)
        layer.load_weight("weight", q, shard)
        layer.load_weight("weight_scale", s.reshape(1), shard)
        layer.load_weight("input_scale", torch.tensor(0.02 + 0.01 * i), shard)
        dense[shard] = q.float() * s
    layer.process_weights_after_loading()
    assert layer.weight_scale.shape == (1, 64) and float(layer.input_scale) == pytest.approx(0.04)
    x = torch.randn(5, 32, generator=g)
    xq = torch.round(x / 0.04).clamp(-128, 127) * 0.04
    expected = xq.double() @ torch.cat([dense[s] for s in "qkv"]).double().t()
    torch.testing.assert_close(layer(x).double(), expected, rtol=1e-5, atol=1e-5)


def test_gate_up_per_channel_shards() -> None:
    from fp8_checkpoints import INT8_LAYOUTS

    layer = MergedLinear(32, {"gate": 16, "up": 16}, bias=False,
                         quant_method=Int8Method(INT8_LAYOUTS["int8-channel-token"], "torch"), dtype=torch.float32)
    ws = []
    for shard in ("gate", "up"):
        q, s = quantize_per_row(torch.randn(16, 32, generator=torch.Generator().manual_seed(len(ws))))
        layer.load_weight("weight", q, shard)
        layer.load_weight("weight_scale", s, shard)
        ws.append(dequantize(q, s))
    layer.process_weights_after_loading()
    x = torch.randn(3, 32)
    xq, xs = quantize_per_row(x)
    torch.testing.assert_close(layer(x), dequantize(xq, xs) @ torch.cat(ws).t(), rtol=1e-5, atol=1e-5)


def test_auto_backend_follows_the_weights_device() -> None:
    method = Int8Method(None)
    assert method.backend == "auto"
    _layer(method, 64, 32)
    assert method.backend == ("triton" if DEVICE == "cuda" else "torch")


# ---- the per-token quantization, alone and fused into its producers ----------------------------------------

def _rows(m: int, k: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g) * torch.logspace(-2, 1, m).view(m, 1)).to(DEVICE, dtype)


def test_triton_per_token_quantizer_equals_torch_round() -> None:
    from pagoda_quant_fp8.formats import INT8
    from pagoda_quant_fp8.triton_quant import quantize_per_token_triton

    x = _rows(6, 3000, torch.float32, 1)
    x[0, :4] = torch.tensor([2.5, -3.5, 0.5, 127.0])  # exact ties after scaling by 1: to even
    x[0, 4] = 127.0
    q, scale = quantize_per_token_triton(x, INT8)
    q_ref, scale_ref = quantize_per_row(x)
    assert q.dtype == torch.int8 and torch.equal(scale, scale_ref) and torch.equal(q, q_ref)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_fused_norm_and_activation_quantize_like_the_unfused_ops(dtype: torch.dtype) -> None:
    from pagoda_quant_fp8.formats import INT8
    from pagoda_quant_fp8.input_quant import FusedTokenQuantizer, TokenQuantizer, close_in_int8

    ops, fused, plain = CustomOps(), FusedTokenQuantizer(quantize_per_row, INT8), TokenQuantizer(quantize_per_row)
    x, res = _rows(5, 1000, dtype, 1), _rows(5, 1000, dtype, 2)
    w = (1 + 0.1 * _rows(1, 1000, torch.float32, 3)[0]).to(dtype)
    pairs = [(fused.rms_norm(ops, x, w, 1e-6), plain.rms_norm(ops, x, w, 1e-6)),
             (fused.fused_add_rms_norm(ops, x, res, w, 1e-6)[0], plain.fused_add_rms_norm(ops, x, res, w, 1e-6)[0]),
             (fused.silu_and_mul(ops, torch.cat([x, res], 1)), plain.silu_and_mul(ops, torch.cat([x, res], 1)))]
    for a, b in pairs:
        assert a.data.dtype == torch.int8 and close_in_int8(a, b)
        assert (a.data != b.data).float().mean() < 0.01  # an int8 step apart only where x * (1 / s) != x / s
