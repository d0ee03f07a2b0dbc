"""The attention layer: reshapes q/k/v into heads and hands them to the attention backend.

With a quantized KV cache (``--kv-cache-dtype fp8``) the layer owns its per-tensor scales
(:class:`~pagoda.interfaces.attention.KVScales`: the checkpoint's ``k_scale``/``v_scale``, else 1.0,
or calibrated on the first real step) and calls its own view of the backend that carries them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.attention.kv_quant import calibrate
from pagoda.errors import IncompatibleChoiceError, ModelLoadError
from pagoda.interfaces.attention import KVScales

if TYPE_CHECKING:
    from pagoda.interfaces.attention import AttentionBackend
    from pagoda.interfaces.model import ForwardContext


class Attention(nn.Module):
    """One layer's attention over the paged KV cache ``fwd.kv_caches[layer_idx]``."""

    def __init__(
        self, layer_idx: int, num_heads: int, num_kv_heads: int, head_dim: int, backend: "AttentionBackend"
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = num_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        _check_spec(backend, num_heads, num_kv_heads, head_dim)
        self.kv_scales = KVScales()  # on the model's device: load_model builds it under torch.device(...)
        self.backend = backend.with_kv_scales(self.kv_scales) if backend.spec.kv_quantized else backend

    def forward(
        self,
        q: torch.Tensor,  # [num_tokens, num_heads * head_dim]
        k: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
        v: torch.Tensor,  # [num_tokens, num_kv_heads * head_dim]
        fwd: "ForwardContext",
    ) -> torch.Tensor:  # [num_tokens, num_heads * head_dim]
        """Write k/v into the layer's cache and attend."""
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.kv_scales.calibrating:  # the first real step (executor.kv_scales): scales from its keys and values
            calibrate(self.kv_scales, k, v, self.backend.spec.cache_dtype)
        out = self.backend.forward(q, k, v, fwd.kv_caches[self.layer_idx], fwd.metadata)
        return out.reshape(-1, self.num_heads * self.head_dim)

    def load_kv_scale(self, which: str, tensor: torch.Tensor) -> None:
        """Copy a checkpoint's per-tensor ``k_scale`` or ``v_scale`` (one element) into this layer's scales
        (kept, unused, when the cache is not quantized)."""
        if tensor.numel() != 1:
            raise ModelLoadError(f"a {which} must hold one per-tensor scale, not a tensor of shape {list(tensor.shape)} "
                                 "(per-head KV cache scales are not supported)")
        getattr(self.kv_scales, which).copy_(tensor.reshape(()).float())

    def extra_repr(self) -> str:
        return f"layer={self.layer_idx}, heads={self.num_heads}, kv_heads={self.num_kv_heads}, head_dim={self.head_dim}"


# checkpoint names of per-tensor KV cache scales: compressed-tensors/llm-compressor (self_attn.k_scale), ModelOpt
# (self_attn.k_proj.k_scale), AutoFP8 (self_attn.k_proj.output_scale) and the older single self_attn.kv_scale
_KV_SCALE = re.compile(r"^(?P<owner>.+?)(?:\.[kv]_proj|\.qkv_proj)?\.(?P<which>k_scale|v_scale|kv_scale)$"
                       r"|^(?P<proj_owner>.+?)\.(?P<proj>[kv])_proj\.output_scale$")


def kv_scale_target(name: str) -> tuple[str, tuple[str, ...]] | None:
    """A checkpoint tensor name of a KV cache scale -> (the attention block's path, which scales it sets:
    ``("k_scale",)``, ``("v_scale",)`` or both for a ``kv_scale``); ``None`` for any other name."""
    match = _KV_SCALE.match(name)
    if match is None:
        return None
    if match["proj"]:
        return match["proj_owner"], (f"{match['proj']}_scale",)
    which = match["which"]
    return match["owner"], (("k_scale", "v_scale") if which == "kv_scale" else (which,))


def _check_spec(backend: "AttentionBackend", num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    spec = backend.spec
    if (spec.num_heads, spec.num_kv_heads, spec.head_size) != (num_heads, num_kv_heads, head_dim):
        raise IncompatibleChoiceError(
            f"The attention backend was built for {spec.num_heads} heads / {spec.num_kv_heads} kv heads / "
            f"head size {spec.head_size}, but the model has {num_heads} / {num_kv_heads} / {head_dim}; "
            "create the backend from pagoda.models.spec.attention_spec(hf_config, ...)."
        )
