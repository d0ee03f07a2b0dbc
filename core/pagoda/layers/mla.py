"""Multi-head latent attention (DeepSeek-V2/V3) over a latent KV cache, in the absorbed form.

A token's keys and values are never expanded per head. The cache keeps one row per token: the
normalised compressed kv ``c`` (``kv_lora_rank`` values) and the rotated rope key ``k_pe``, shared by all
heads (:class:`pagoda.interfaces.attention.MLASpec`). ``kv_b_proj`` would expand ``c`` into each head's
no-rope key ``W_UK c`` and value ``W_UV c``; instead

- ``W_UK`` is folded into the query: ``q_nope . (W_UK c) = (W_UK^T q_nope) . c``, so each head's query
  becomes ``[W_UK^T q_nope, q_pe]`` and scores the cached rows directly;
- ``W_UV`` is applied after attention: ``sum_j p_j W_UV c_j = W_UV (sum_j p_j c_j)``.

So decode reads only the latent rows (``latent_size`` values per token, whatever the head count), and the
backend's ``forward_mla`` is one multi-query attention whose keys are the rows and whose values are their
first ``kv_lora_rank`` entries. Prefill uses the same form (exact, with more FLOPs per key than the
expanded form).

``W_UK`` and ``W_UV`` are read from ``kv_b_proj`` after loading, whatever its quantization method, by
applying the layer to the identity (:meth:`LatentAttention.process_weights_after_loading`); the module that
owns both registers ``kv_b_proj`` before this layer, so the loader has finished ``kv_b_proj`` by then.
Under tensor parallelism ``kv_b_proj`` is column-parallel (this rank's heads) and the latent, replicated,
is cached whole on every rank.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from pagoda.errors import IncompatibleChoiceError

if TYPE_CHECKING:
    from pagoda.interfaces.attention import AttentionBackend
    from pagoda.interfaces.model import ForwardContext
    from pagoda.layers.linear import LinearBase


class LatentAttention(nn.Module):
    """One layer's MLA: absorbed queries -> ``backend.forward_mla`` over ``fwd.kv_caches[layer_idx]`` -> values.

    ``kv_b_proj`` maps the latent ``[T, kv_lora_rank]`` to ``[T, num_heads * (nope_dim + v_dim)]`` (each head's
    no-rope key, then its value; this rank's heads).
    """

    def __init__(self, layer_idx: int, num_heads: int, nope_dim: int, v_dim: int, kv_b_proj: "LinearBase",
                 backend: "AttentionBackend", dtype: torch.dtype) -> None:
        super().__init__()
        mla = backend.spec.mla
        if mla is None or backend.spec.num_heads != num_heads:
            raise IncompatibleChoiceError(
                f"the attention backend was built for {backend.spec.num_heads} heads without a latent cache "
                f"(AttentionSpec.mla={mla}), but this layer runs multi-head latent attention over {num_heads} heads; "
                "create the backend from pagoda.models.spec.attention_spec(hf_config, ...)")
        self.layer_idx, self.num_heads, self.nope_dim, self.v_dim = layer_idx, num_heads, nope_dim, v_dim
        self.kv_lora_rank = mla.kv_lora_rank
        self.backend = backend
        self._kv_b_proj = (kv_b_proj,)  # not a child: its owner registers (and the loader processes) it first
        self.register_buffer("w_uk", torch.empty(0, dtype=dtype), persistent=False)  # [heads, nope_dim, kv_lora_rank]
        self.register_buffer("w_uv", torch.empty(0, dtype=dtype), persistent=False)  # [heads, kv_lora_rank, v_dim]

    @torch.no_grad()
    def process_weights_after_loading(self) -> None:
        """Read ``W_UK`` and ``W_UV`` out of ``kv_b_proj`` (already processed by its quantization method)."""
        kv_b_proj, dtype = self._kv_b_proj[0], self.w_uk.dtype
        eye = torch.eye(self.kv_lora_rank, dtype=dtype, device=next(kv_b_proj.parameters()).device)
        dense = kv_b_proj(eye).t().float()  # [heads * (nope + v), kv_lora_rank]: W, dequantized if quantized
        per_head = dense.view(self.num_heads, self.nope_dim + self.v_dim, self.kv_lora_rank)
        self.w_uk = per_head[:, : self.nope_dim].contiguous().to(dtype)  # [heads, nope, kv_lora_rank]
        self.w_uv = per_head[:, self.nope_dim :].transpose(1, 2).contiguous().to(dtype)  # [heads, kv_lora_rank, v]

    def forward(
        self,
        q_nope: torch.Tensor,  # [T, heads, nope_dim]
        q_pe: torch.Tensor,  # [T, heads, rope_dim], rotated
        latent: torch.Tensor,  # [T, kv_lora_rank + rope_dim]: normalised kv latent, then the rotated rope key
        fwd: "ForwardContext",
    ) -> torch.Tensor:  # [T, heads * v_dim]
        q_lat = torch.bmm(q_nope.transpose(0, 1), self.w_uk)  # [heads, T, kv_lora_rank]
        query = torch.cat((q_lat.transpose(0, 1), q_pe), dim=-1)  # [T, heads, latent_size]
        out = self.backend.forward_mla(query, latent, fwd.kv_caches[self.layer_idx], fwd.metadata)  # [T, heads, L]
        values = torch.bmm(out.transpose(0, 1), self.w_uv)  # [heads, T, v_dim]
        return values.transpose(0, 1).reshape(-1, self.num_heads * self.v_dim)

    def extra_repr(self) -> str:
        return (f"layer={self.layer_idx}, heads={self.num_heads}, kv_lora_rank={self.kv_lora_rank}, "
                f"nope={self.nope_dim}, v={self.v_dim}")
