"""Dense layers compute through the platform's CustomOps once the engine binds them (a GPU platform's
GEMV kernel for decode steps), and through F.linear before; the CPU routing refuses the kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.layers.csrc_ops import gemv_fits
from pagoda.interfaces.ops import CustomOps
from pagoda.quantization.unquantized import UnquantizedMethod


class RecordingOps(CustomOps):
    def __init__(self) -> None:
        self.shapes: list[tuple[int, ...]] = []

    def linear(self, x, weight, bias=None):
        self.shapes.append(tuple(x.shape))
        return super().linear(x, weight, bias)


def dense_layer(method: UnquantizedMethod) -> nn.Module:
    layer = nn.Module()
    method.create_weights(layer, 16, 8, torch.float32)
    layer.weight.data.copy_(torch.randn(8, 16))
    return layer


def test_bound_ops_compute_the_layer() -> None:
    method, ops = UnquantizedMethod(), RecordingOps()
    layer = dense_layer(method)
    x, bias = torch.randn(3, 16), torch.randn(8)
    unbound = method.apply(layer, x, bias)
    assert ops.shapes == []
    method.bind_ops(ops)
    torch.testing.assert_close(method.apply(layer, x, bias), F.linear(x, layer.weight, bias), rtol=0, atol=0)
    torch.testing.assert_close(unbound, F.linear(x, layer.weight, bias), rtol=0, atol=0)
    assert ops.shapes == [(3, 16)]


def test_the_engine_binds_the_platform_ops(tiny_models) -> None:
    from pagoda import LLM

    model = LLM(model=tiny_models["llama"][0], dtype="float32", skip_tokenizer_init=True).engine.core.parts.model
    methods = {id(m.quant_method): m.quant_method for m in model.modules() if hasattr(m, "quant_method")}
    assert methods and all(isinstance(m.ops, CustomOps) for m in methods.values())


def test_cpu_tensors_never_go_to_the_gemv_kernel() -> None:
    x, w = torch.randn(1, 64, dtype=torch.bfloat16), torch.randn(32, 64, dtype=torch.bfloat16)
    assert not gemv_fits(x, w, None, 4)
