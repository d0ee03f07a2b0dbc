"""Random weights from the config (``--load-format dummy``), for benchmarks and tests.

Deterministic (a fixed seed, generated on the parameter's own device, so a large model never
passes through host memory); norm weights are ones, quantization scales 0.02 and other floats ~ N(0, 0.02), which keeps
activations and logits finite through any depth.
"""

from __future__ import annotations

import torch
from torch import nn

DUMMY_SEED = 1234
DUMMY_STD = 0.02
_DIRECT = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


@torch.no_grad()
def fill_dummy_weights(model: nn.Module, seed: int = DUMMY_SEED) -> set[str]:
    """Fill every parameter in place; returns their names (all of them are now 'loaded')."""
    filled = set()
    generators: dict[torch.device, torch.Generator] = {}
    for name, param in model.named_parameters():
        gen = generators.get(param.device)
        if gen is None:
            gen = generators[param.device] = torch.Generator(device=param.device).manual_seed(seed)
        _fill(name, param.data, gen)
        filled.add(name)
    return filled


def _fill(name: str, data: torch.Tensor, gen: torch.Generator) -> None:
    module, _, leaf = name.rpartition(".")
    if data.dtype.is_floating_point and "norm" in module.rpartition(".")[2]:
        data.fill_(1.0)
    elif data.dtype.is_floating_point and "scale" in leaf:  # quantization scales stay positive
        data.fill_(DUMMY_STD)
    elif data.dtype in _DIRECT:
        data.normal_(0.0, DUMMY_STD, generator=gen)
    elif data.dtype.is_floating_point:  # e.g. fp8: draw in float32, then convert
        data.copy_(torch.empty(data.shape, device=data.device).normal_(0.0, DUMMY_STD, generator=gen))
    else:  # packed integer weights: any bit pattern is a valid value
        info = torch.iinfo(data.dtype)
        low, high = max(info.min, -(2**31)), min(info.max, 2**31 - 1)
        data.copy_(torch.randint(low, high, data.shape, device=data.device, generator=gen))
