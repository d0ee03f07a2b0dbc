"""Pieces the vision towers share: an unquantized build context, activations, patch embeddings and
bidirectional attention over packed segments (one image, or one window of one, per segment)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.errors import ModelLoadError
from pagoda.interfaces.model import BuildContext
from pagoda.interfaces.parallel import SINGLE
from pagoda.layers.linear import copy_checked
from pagoda.layers.sharding import materialize
from pagoda.quantization.unquantized import UnquantizedMethod

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "silu": F.silu,
}


def vision_context(ctx: BuildContext) -> BuildContext:
    """The build context of a vision tower and projector: dense weights (released quantized VLM checkpoints
    keep the tower unquantized) on every tensor-parallel rank whole."""
    method = UnquantizedMethod()
    method.bind_ops(ctx.ops)
    return dataclasses.replace(ctx, quant_method=method, tp=SINGLE)


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The elementwise activation a vision config names (``hidden_act``)."""
    if name not in ACTIVATIONS:
        raise ModelLoadError(f"vision hidden_act '{name}' is not supported (supported: {', '.join(ACTIVATIONS)})")
    return ACTIVATIONS[name]


class PatchEmbedding(nn.Module):
    """A patchifying convolution (stride = kernel) as one matmul over flattened patches.

    ``weight`` is ``[out, in_channels * prod(kernel)]``; the checkpoint's convolution kernel
    ``[out, in_channels, *kernel]`` is flattened on load, which is the order :func:`patches` flattens in.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype), requires_grad=False)
        self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype), requires_grad=False) if bias else None

    def forward(self, flat_patches: torch.Tensor) -> torch.Tensor:
        """``[..., in_features]`` -> ``[..., out_features]``."""
        return F.linear(flat_patches.to(self.weight.dtype), self.weight, self.bias)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        param, tensor = getattr(self, param_name), materialize(tensor)
        copy_checked(param.data, tensor.reshape(param.shape) if tensor.numel() == param.numel() else tensor)


def patches(pixel_values: torch.Tensor, patch: int) -> torch.Tensor:
    """``[B, C, H, W]`` -> ``[B, (H/p) * (W/p), C * p * p]``: row-major patches, each channel-major."""
    b, c, h, w = pixel_values.shape
    x = pixel_values.reshape(b, c, h // patch, patch, w // patch, patch)
    return x.permute(0, 2, 4, 1, 3, 5).reshape(b, (h // patch) * (w // patch), c * patch * patch)


def segment_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bounds: list[int],
                      scale: float) -> torch.Tensor:
    """Bidirectional attention within each segment ``[bounds[i], bounds[i + 1])`` of packed tokens.

    ``q``, ``k``, ``v``: ``[num_tokens, heads, head_dim]``; returns the same shape. Segments of one length
    run as one batch; otherwise they are padded to the longest and the padding masked out.
    """
    lens = [b - a for a, b in zip(bounds, bounds[1:])]
    if len(set(lens)) == 1:  # equal segments: a plain batch
        split = [x.view(len(lens), lens[0], *x.shape[1:]).transpose(1, 2) for x in (q, k, v)]
        out = F.scaled_dot_product_attention(*split, scale=scale)  # [S, heads, len, d]
        return out.transpose(1, 2).reshape(q.shape)
    width, device = max(lens), q.device
    seg = torch.repeat_interleave(torch.arange(len(lens), device=device), torch.tensor(lens, device=device))
    starts = torch.tensor(bounds[:-1], device=device)
    index = torch.arange(q.shape[0], device=device) + seg * width - starts[seg]  # [num_tokens] padded slot
    valid = torch.arange(width, device=device)[None, :] < torch.tensor(lens, device=device)[:, None]

    def pad(x: torch.Tensor) -> torch.Tensor:  # [num_tokens, h, d] -> [S, h, width, d]
        out = x.new_zeros(len(lens) * width, *x.shape[1:]).index_copy_(0, index, x)
        return out.view(len(lens), width, *x.shape[1:]).transpose(1, 2)

    out = F.scaled_dot_product_attention(pad(q), pad(k), pad(v), attn_mask=valid[:, None, None], scale=scale)
    return out.transpose(1, 2).flatten(0, 1).index_select(0, index)
