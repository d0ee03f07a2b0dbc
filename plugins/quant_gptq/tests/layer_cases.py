"""Linear layers built with the plugin's methods from the test quantizer's tensors, and their float64
reference (``x @ W``, W dequantized from the quantizer's own integers)."""

from __future__ import annotations

import torch
from int_quantizer import IntWeights, Layout, checkpoint_tensors, quantization_config, quantize

from pagoda.layers.linear import Linear, MergedLinear
from pagoda_quant_gptq.method import GptqMethod, Wna16Method


def method_for(layout: Layout):
    cls = GptqMethod if layout.fmt == "gptq" else Wna16Method
    return cls(quantization_config(layout))


def quantized_shards(layout: Layout, k: int, sizes: list[int], seed: int = 0) -> list[IntWeights]:
    """One quantized ``[size, k]`` weight per shard, sharing one act-order permutation."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(k, generator=g)
    return [quantize(torch.randn(size, k, generator=g) * 0.05, layout, perm) for size in sizes]


def build_layer(layout: Layout, shards: list[IntWeights], dtype: torch.dtype = torch.float32):
    """A Linear (one shard) or MergedLinear holding ``shards``, loaded and processed."""
    k = shards[0].q.shape[0]
    sizes = [quant.q.shape[1] for quant in shards]
    method = method_for(layout)
    if len(shards) == 1:
        layer = Linear(k, sizes[0], bias=False, quant_method=method, dtype=dtype)
    else:
        layer = MergedLinear(k, {f"s{i}": size for i, size in enumerate(sizes)}, bias=False, quant_method=method,
                             dtype=dtype)
    for i, quant in enumerate(shards):
        for name, tensor in checkpoint_tensors(quant, layout).items():
            layer.load_weight(name, tensor, None if len(shards) == 1 else f"s{i}")
    layer.process_weights_after_loading()
    return layer


def reference(shards: list[IntWeights]) -> torch.Tensor:
    """float64 ``[K, N]``: the shards' dequantized weights side by side."""
    return torch.cat([quant.dequantized() for quant in shards], dim=1)


def check_close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, rel: float | None = None) -> None:
    """Within one rounding of the output plus ``rel`` of the row's largest value (fp32 sums, rounded
    weights in 16-bit dtypes)."""
    rel = rel if rel is not None else {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 1e-2)
    assert got.dtype == dtype and got.shape == expected.shape
    err = (got.double() - expected).abs()
    bound = expected.abs() * torch.finfo(dtype).eps + expected.abs().amax(1, keepdim=True) * rel
    assert (err <= bound).all(), f"max error {err.max():.3e} (bound {bound.min():.3e}..)"
