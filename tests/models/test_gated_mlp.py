"""The gated MLP hands its gate_up projection and SiLU to the platform as one op
(``CustomOps.silu_mul_linear``: the csrc GEMV can write silu(gate) * up in its epilogue), and keeps the two
apart where that op cannot stand in: a quantizer on down_proj's input, another activation."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from hf_tiny import build_ctx, hf_config
from pagoda.interfaces.quantization import InputQuantizer
from pagoda.layers.ops import CustomOps
from pagoda.models.llama import DecoderOptions, GatedMLP


class Recording(CustomOps):
    def __init__(self) -> None:
        self.fused: list[tuple[int, int]] = []

    def silu_mul_linear(self, x, weight, bias=None):
        self.fused.append(tuple(weight.shape))
        return super().silu_mul_linear(x, weight, bias)


def mlp(act: str = "silu") -> tuple[GatedMLP, Recording]:
    config = hf_config("llama", hidden_act=act)
    ops = Recording()
    ctx = dataclasses.replace(build_ctx(config), ops=ops)
    layer = GatedMLP(config, ctx, DecoderOptions())
    torch.manual_seed(0)
    for p in layer.parameters():
        p.data.normal_(0, 0.2)
    return layer, ops


def reference(layer: GatedMLP, x: torch.Tensor) -> torch.Tensor:
    gate, up = F.linear(x.double(), layer.gate_up_proj.weight.double()).chunk(2, dim=-1)
    return F.linear(F.silu(gate) * up, layer.down_proj.weight.double())


def test_silu_goes_to_the_platform_with_its_projection():
    layer, ops = mlp()
    x = torch.randn(3, layer.gate_up_proj.in_features)
    out = layer(x)
    assert ops.fused == [tuple(layer.gate_up_proj.weight.shape)]
    torch.testing.assert_close(out.double(), reference(layer, x), rtol=1e-5, atol=1e-5)


def test_a_quantized_down_proj_input_or_another_activation_keeps_them_apart():
    layer, ops = mlp()
    seen = []

    class Quantizer(InputQuantizer):
        def quantize(self, x):
            seen.append(x.shape)
            return x

    layer.down_proj.input_quantizer = Quantizer()
    x = torch.randn(2, layer.gate_up_proj.in_features)
    torch.testing.assert_close(layer(x).double(), reference(layer, x), rtol=1e-5, atol=1e-5)
    assert ops.fused == [] and seen == [(2, layer.down_proj.in_features)]
    gelu, ops = mlp("gelu_pytorch_tanh")
    gelu(x)
    assert ops.fused == []
