"""Linear layers of every layout against the float64 dequantize-then-matmul reference (CPU: the torch
path; the Triton kernels under the interpreter): GPTQ 4/8 bits, sym/asym, act-order, v1/v2 zero points,
group 32/128/per channel; compressed-tensors W4A16/W8A16 group (with and without actorder) and channel;
fused layers; zero points the v1 format stores as 15 (16); clear errors for unusable tensors."""

from __future__ import annotations

import itertools

import pytest
import torch
from int_quantizer import Layout, checkpoint_tensors
from layer_cases import build_layer, check_close, method_for, quantized_shards, reference

from pagoda.errors import ModelLoadError
from pagoda.layers.linear import Linear, MergedLinear

GPTQ = [Layout("gptq", bits, group, sym, act, v1) for bits, group, sym, act, v1 in itertools.product(
    (4, 8), (32, 128, -1), (True, False), (False, True), (True,)) if not (group == -1 and act)]
GPTQ += [Layout("gptq", 4, 64, False, True, v1=False), Layout("gptq", 8, 32, False, False, v1=False)]
CT = [Layout("compressed-tensors", bits, group, sym, act, scale_dtype=torch.bfloat16)
      for bits, group, sym, act in itertools.product((4, 8), (32, 128, -1), (True, False), (False, True))
      if not (group == -1 and act)]


@pytest.mark.parametrize("layout", GPTQ + CT, ids=str)
def test_layer_equals_the_float64_reference(layout: Layout) -> None:
    shards = quantized_shards(layout, 256, [64, 32, 32], seed=layout.bits + layout.group)
    layer = build_layer(layout, shards)
    x = torch.randn(5, 256, generator=torch.Generator().manual_seed(1))
    check_close(layer(x), x.double() @ reference(shards), torch.float32)


@pytest.mark.parametrize("layout", [Layout("gptq", 4, 32, False, True), Layout("compressed-tensors", 8, 64, True, True),
                                    Layout("gptq", 8, -1, False, False)], ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_model_dtypes(layout: Layout, dtype: torch.dtype) -> None:
    shards = quantized_shards(layout, 128, [64])
    layer = build_layer(layout, shards, dtype)
    x = torch.randn(3, 128, generator=torch.Generator().manual_seed(2)).to(dtype)
    check_close(layer(x), x.double() @ reference(shards), dtype)


def test_act_order_permutes_the_input_once_and_no_order_reads_it_as_it_is() -> None:
    plain = build_layer(Layout(act_order=False), quantized_shards(Layout(act_order=False), 128, [64]))
    assert plain.int4_index is None and plain.int4_group == 32
    ordered = build_layer(Layout(act_order=True), quantized_shards(Layout(act_order=True), 128, [64]))
    assert sorted(ordered.int4_index.tolist()) == list(range(128)), "a permutation: no padding on one rank"
    channel = build_layer(Layout(group=-1, sym=False), quantized_shards(Layout(group=-1, sym=False), 192, [64]))
    assert channel.int4_index is None and channel.int4_group == 64, "one group of 192 rows: runs of 64, unpadded"


@pytest.mark.parametrize("bits", [4, 8])
def test_v1_zero_points_stored_as_the_largest_value(bits: int) -> None:
    """A v1 checkpoint stores z - 1: a stored 15 (8 bits: 255) is a zero point of 16 (256), one more
    than the kernels' nibbles hold; it is served exactly (the excess term)."""
    layout = Layout("gptq", bits, 32, sym=False, act_order=True)
    shards = quantized_shards(layout, 128, [64, 32])
    top = 2**bits
    shards[0].zeros[1, :7] = top
    shards[1].zeros[3, 30] = top
    layer = build_layer(layout, shards)
    assert layer.int4_excess is not None
    x = torch.randn(4, 128, generator=torch.Generator().manual_seed(3))
    check_close(layer(x), x.double() @ reference(shards), torch.float32)


def test_gptq_sym_reads_the_zero_point_the_format_defines() -> None:
    """Symmetric GPTQ: z = 2**(bits - 1) whatever qzeros hold (random bits in dummy weights)."""
    layout = Layout("gptq", 4, 32, sym=True)
    shards = quantized_shards(layout, 64, [64])
    layer = Linear(64, 64, bias=False, quant_method=method_for(layout), dtype=torch.float32)
    tensors = checkpoint_tensors(shards[0], layout)
    tensors["qzeros"] = torch.full_like(tensors["qzeros"], 0x12345678)
    for name, tensor in tensors.items():
        layer.load_weight(name, tensor)
    layer.process_weights_after_loading()
    x = torch.randn(2, 64)
    check_close(layer(x), x.double() @ reference(shards), torch.float32)


@pytest.mark.parametrize("kernel", ["triton", "dense"])
@pytest.mark.parametrize("layout", [Layout("gptq", 4, 32, False, True), Layout("gptq", 8, 64, False, True),
                                    Layout("compressed-tensors", 8, -1, True, False)], ids=str)
def test_triton_kernels_on_the_checkpoint_layout(triton_interpreter, kernel: str, layout: Layout) -> None:
    from pagoda_quant_gptq.layout import grouped_linear

    shards = quantized_shards(layout, 256, [64, 64], seed=4)
    shards[0].zeros[0, 0] = min(shards[0].zeros[0, 0].item(), 2**layout.bits - 2)
    layer = build_layer(layout, shards)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(5))
    check_close(grouped_linear(layer, x, kernel), x.double() @ reference(shards), torch.float32, rel=2e-5)


def test_fused_shards_with_different_g_idx_are_refused() -> None:
    layout = Layout("gptq", 4, 32, act_order=True)
    g = torch.Generator().manual_seed(0)
    from int_quantizer import quantize

    first = quantize(torch.randn(32, 64, generator=g), layout, torch.randperm(64, generator=g))
    second = quantize(torch.randn(32, 64, generator=g), layout, torch.randperm(64, generator=g))
    with pytest.raises(ModelLoadError, match="shards of a fused layer .* hold different g_idx .*shard 1 differs"):
        build_layer(layout, [first, second])


def test_a_g_idx_outside_the_groups_is_refused() -> None:
    layout = Layout("gptq", 4, 32, act_order=True)
    shards = quantized_shards(layout, 64, [32])
    shards[0].g_idx[5] = 2  # two groups: 0 and 1
    with pytest.raises(ModelLoadError, match=r"GPTQ g_idx holds 1 of 64 values outside the layer's groups 0..1 "
                                             r"\(e.g. 2\).*desc_act false"):
        build_layer(layout, shards)


def test_compressed_tensors_unset_g_idx_means_column_order() -> None:
    layout = Layout("compressed-tensors", 4, 32, act_order=True)
    shards = quantized_shards(Layout("compressed-tensors", 4, 32), 64, [32])  # quantized in column order
    layer = Linear(64, 32, bias=False, quant_method=method_for(layout), dtype=torch.float32)
    for name, tensor in checkpoint_tensors(shards[0], layout).items():
        layer.load_weight(name, torch.full_like(tensor, -1) if name == "weight_g_idx" else tensor)
    layer.process_weights_after_loading()
    x = torch.randn(2, 64)
    check_close(layer(x), x.double() @ reference(shards), torch.float32)


def test_sizes_that_do_not_pack_are_refused() -> None:
    with pytest.raises(ModelLoadError, match="GPTQ 4-bit weights pack 8 values per int32: this layer's 60 inputs"):
        Linear(60, 64, bias=False, quant_method=method_for(Layout()), dtype=torch.float32)
    with pytest.raises(ModelLoadError, match=r"outputs \[64, 12\] must be multiples of 8"):
        MergedLinear(64, {"a": 64, "b": 12}, bias=False, quant_method=method_for(Layout()), dtype=torch.float32)
