"""Non-attention kernels behind one object, so a platform can swap in fused device kernels.

These torch implementations are the reference (and the CPU path); ``Platform.custom_ops()``
returns a subclass backed by csrc kernels on GPUs. All methods are pure functions of their
inputs except ``rotary_embedding`` and ``reshape_and_cache``, which write in place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from pagoda.interfaces.attention import quantize_kv

if TYPE_CHECKING:
    from pagoda.interfaces.parallel import TensorParallel


class CustomOps:
    name = "torch"

    def tune(self, model: torch.nn.Module, tp: "TensorParallel | None" = None) -> str:
        """Choose launch parameters for the loaded ``model``'s shapes by timing them (called once, before the KV
        cache takes the free memory; by every rank of ``tp`` together, which then choose alike); returns a line
        for the log, empty when nothing was tuned (as here)."""
        return ""

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """``x``: [num_tokens, hidden]. Computed in float32, like HF."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return weight * xf.to(x.dtype)

    def fused_add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(rms_norm(x + residual), x + residual)``."""
        residual = x + residual
        return self.rms_norm(residual, weight, eps), residual

    def rotary_embedding(
        self,
        positions: torch.Tensor,  # [num_tokens]
        query: torch.Tensor,  # [num_tokens, num_heads * head_size]
        key: torch.Tensor,  # [num_tokens, num_kv_heads * head_size]
        head_size: int,
        cos_sin_cache: torch.Tensor,  # [max_position, rotary_dim] : cos half then sin half
        is_neox: bool,
    ) -> None:
        """Rotate q and k in place (the first ``rotary_dim`` features of each head)."""
        cos, sin = cos_sin_cache[positions].chunk(2, dim=-1)  # [num_tokens, rotary_dim / 2]
        for x in (query, key):
            heads = x.view(x.shape[0], -1, head_size)
            rot = heads[..., : cos.shape[-1] * 2]
            rot.copy_(_rotate(rot.float(), cos[:, None].float(), sin[:, None].float(), is_neox).to(x.dtype))

    def silu_and_mul(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: [num_tokens, 2 * d] -> silu(x[:, :d]) * x[:, d:]."""
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def masked_embedding(self, ids: torch.Tensor, weight: torch.Tensor, start: int) -> torch.Tensor:
        """[num_tokens] int ids -> [num_tokens, hidden]: row ``ids[t] - start`` of ``weight`` [rows, hidden] where
        ``0 <= ids[t] - start < rows``, else zeros (a vocab-parallel rank's share of the embedding)."""
        local = ids.long() - start  # [num_tokens]
        mine = (local >= 0) & (local < weight.shape[0])  # [num_tokens]
        rows = F.embedding(local.masked_fill(~mine, 0), weight)  # [num_tokens, hidden]
        return rows.masked_fill_(~mine.unsqueeze(-1), 0)

    def linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """``x``: [num_tokens, in] @ ``weight`` [out, in]^T (+ ``bias``): a dense layer. ``weight`` is as loaded
        or as :meth:`pack_linear_weight` made it."""
        return F.linear(x, weight, bias)

    def pack_linear_weight(self, weight: torch.Tensor) -> torch.Tensor | None:
        """A dense weight [out, in] in the layout :meth:`linear` multiplies fastest, made once after loading
        (the caller then keeps only it, unless the dense tensor has other readers); None: keep it as it is."""
        return None

    def fused_moe(
        self,
        x: torch.Tensor,  # [num_tokens, hidden]
        w13: torch.Tensor,  # [num_experts, 2 * inter, hidden]: gate rows then up rows
        w2: torch.Tensor,  # [num_experts, hidden, inter]
        topk_weights: torch.Tensor,  # [num_tokens, top_k] float32
        topk_ids: torch.Tensor,  # [num_tokens, top_k] int
    ) -> torch.Tensor:
        """Sum over each token's experts of ``weight * w2[e] @ silu_and_mul(w13[e] @ x)``: [num_tokens, hidden].

        The reference: one dense matmul pair per expert that received tokens (host loop)."""
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for expert in topk_ids.unique().tolist():
            token, slot = (topk_ids == expert).nonzero(as_tuple=True)  # [n], [n]
            hidden = self.silu_and_mul(F.linear(x[token], w13[expert]))  # [n, inter]
            y = F.linear(hidden, w2[expert]).float()  # [n, hidden]
            out.index_add_(0, token, y * topk_weights[token, slot, None].float())
        return out.to(x.dtype)

    def reshape_and_cache(
        self,
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        kv_cache: torch.Tensor,  # [2, num_blocks, block_size, num_kv_heads, head_size]
        slot_mapping: torch.Tensor,  # [num_tokens]; negative slots are skipped (padding)
        k_scale: torch.Tensor | None = None,  # float32 0-dim: an FP8 cache stores key / k_scale
        v_scale: torch.Tensor | None = None,
    ) -> None:
        """Write this step's keys and values into their paged slots; into an FP8 cache (scales given)
        divided by the scales, saturated to the format's range and rounded to nearest even."""
        valid = slot_mapping >= 0
        slots = slot_mapping[valid]
        for half, x, scale in ((0, key, k_scale), (1, value, v_scale)):
            stored = x[valid].to(kv_cache.dtype) if scale is None else quantize_kv(x[valid], scale, kv_cache.dtype)
            kv_cache[half].view(-1, *key.shape[1:])[slots] = stored


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    if is_neox:  # halves: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # gpt-j: interleaved pairs
    return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
