"""The tiles layout on CPU: layers of every kind repacked as on an sm_80+ GPU, the tensor-core kernel
and its dequantizing kernel emulated by pagoda-quant-awq's tests (tile_emulator.py: the kernel's
addressing and bit tricks, the MMA by PTX's fragment layouts), the layer's own gather, 8-bit halves
and excess term around them, against the float64 reference."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from int_quantizer import Layout
from layer_cases import build_layer, check_close, quantized_shards, reference
from tile_emulator import emulate_dequantize, emulate_gemm, plan_token_tiles

from pagoda_quant_awq import dispatch
from pagoda_quant_awq.tiles import AwqTiles

TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.fixture
def emulated_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Layers repacked into the tiles layout on CPU; the CUDA kernels emulated."""
    def gemm(x, tiles, bias=None, kernel=None, split_k=0):
        assert kernel == "tiles"
        return emulate_gemm(x, tiles, plan_token_tiles(x.shape[0]), max(split_k, 1))

    def dequantize(weights, scales, zeros, group):
        return emulate_dequantize(AwqTiles(weights, scales, zeros, torch.zeros(1, dtype=torch.int32), group))

    monkeypatch.setattr(dispatch, "tiles_reason", lambda *shape: None)
    monkeypatch.setattr(dispatch, "awq_tiles_linear", gemm)
    monkeypatch.setattr(dispatch, "tiles_extension", lambda: SimpleNamespace(awq_tiles_dequantize=dequantize))


@pytest.mark.parametrize("m", [3, 12, 80])  # one and two token tiles (the fold path), then tiles_dense
@pytest.mark.parametrize("layout", [
    Layout("gptq", 4, 32, sym=False, act_order=True),
    Layout("gptq", 8, 64, sym=True, act_order=True),  # two halves, each with its own scales
    Layout("gptq", 4, -1, sym=False, v1=False),
    Layout("compressed-tensors", 8, 128, sym=False),
], ids=str)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tiles_layout_equals_the_float64_reference(emulated_tiles, layout: Layout, m: int, dtype: torch.dtype) -> None:
    shards = quantized_shards(layout, 256, [64, 64], seed=m)
    if not layout.sym and layout.fmt == "gptq" and layout.v1:
        shards[1].zeros[2, 5:9] = 2**layout.bits  # stored as 15 (v1): the excess term
    layer = build_layer(layout, shards, dtype)
    assert hasattr(layer, "tiles_weights") and not hasattr(layer, "int4_qweight")
    assert layer.tiles_weights.shape == (128 // 64, layer.int4_halves * 256 // 16, 32, 4)
    x = torch.randn(m, 256, generator=torch.Generator().manual_seed(m)).to(dtype)
    check_close(layer(x), x.double() @ reference(shards), dtype, TOL[dtype])


def test_a_padded_layer_in_the_tiles_layout(emulated_tiles) -> None:
    """A row split of act-order rows (any number of each group's rows): runs padded with zero inputs."""
    from pagoda_quant_gptq.grouped import GroupedWeights
    from pagoda_quant_gptq.int4_form import to_int4
    from pagoda_quant_gptq.layout import grouped_linear, store

    g = torch.Generator().manual_seed(0)
    gid = torch.randint(0, 4, (96,), generator=g)  # 4 groups, uneven counts
    weights = GroupedWeights(torch.randint(0, 16, (96, 64), generator=g), torch.randint(0, 17, (4, 64), generator=g),
                             torch.rand(4, 64, generator=g).half() * 0.01, gid, 4)
    form = to_int4(weights)
    assert form.plan.padded and form.q.shape[0] % 32 == 0
    layer = torch.nn.Module()
    store(layer, form, torch.float16)
    x = torch.randn(5, 96, generator=g).half()
    check_close(grouped_linear(layer, x), x.double() @ weights.dequantize(), torch.float16, TOL[torch.float16])
