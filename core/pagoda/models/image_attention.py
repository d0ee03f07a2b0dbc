"""Decoder attention in which the tokens of an image also see the rest of their image (Gemma 3).

Gemma 3 attends causally, except that an image's placeholder tokens attend to each other in both
directions. The attention backend computes the causal result for every token (and writes the step's
keys and values); this layer then recomputes the rows of each image run in the step over the keys read
back from the paged cache, up to the run's last token, within the layer's sliding window. Every
backend stores the cache in the default layout ``[2, blocks, block_size, kv_heads, head_dim]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.attention.kv_quant import dequantize_kv

if TYPE_CHECKING:
    from pagoda.interfaces.attention import AttentionMetadata
    from pagoda.interfaces.model import ForwardContext
    from pagoda.interfaces.multimodal import ImageSpan
    from pagoda.layers.attention import Attention


class ImageRunAttention(nn.Module):
    """Wraps one layer's :class:`~pagoda.layers.attention.Attention` (same call, same cache)."""

    def __init__(self, inner: "Attention") -> None:
        super().__init__()
        self.inner = inner

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fwd: "ForwardContext") -> torch.Tensor:
        out = self.inner(q, k, v, fwd)  # [T, heads * d]: causal everywhere
        mm = fwd.multimodal
        if mm is None or not mm.spans:
            return out
        a = self.inner
        queries = q.view(-1, a.num_heads, a.head_dim)
        cache = fwd.kv_caches[a.layer_idx]
        layout = _SeqLayout(fwd.metadata)
        for span in mm.spans:
            rows = self._attend_run(queries[span.start : span.end], cache, layout, span)  # [n, heads, d]
            out[span.start : span.end] = rows.reshape(rows.shape[0], -1).to(out.dtype)
        return out

    def _attend_run(self, q: torch.Tensor, cache: torch.Tensor, layout: "_SeqLayout", span: "ImageSpan") -> torch.Tensor:
        spec = self.inner.backend.spec
        q_pos = layout.position(span.seq, span.start) + torch.arange(q.shape[0], device=q.device)  # [n]
        num_keys = int(q_pos[-1]) + 1  # every key up to the run's last token in this step
        blocks = layout.block_tables[span.seq, : -(-num_keys // spec.block_size)].long()
        k = cache[0][blocks].flatten(0, 1)[:num_keys].transpose(0, 1)  # [kv_heads, L, d]
        v = cache[1][blocks].flatten(0, 1)[:num_keys].transpose(0, 1)
        if spec.kv_quantized:  # an FP8 cache: stored * scale, in the model dtype
            scales = self.inner.kv_scales
            k, v = dequantize_kv(k, scales.k_scale, q.dtype), dequantize_kv(v, scales.v_scale, q.dtype)
        mask = torch.ones(q.shape[0], num_keys, dtype=torch.bool, device=q.device)
        if spec.sliding_window:
            mask &= torch.arange(num_keys, device=q.device)[None, :] > q_pos[:, None] - spec.sliding_window
        out = F.scaled_dot_product_attention(q.transpose(0, 1).to(k.dtype)[None], k[None], v[None],
                                             attn_mask=mask[None, None], scale=spec.scale, enable_gqa=True)
        return out[0].transpose(0, 1)  # [n, heads, d]


class _SeqLayout:
    """Host copies of where each sequence's step tokens sit in its sequence."""

    def __init__(self, metadata: "AttentionMetadata") -> None:
        self.starts = metadata.query_start_loc.tolist()
        self.seq_lens = metadata.seq_lens.tolist()
        self.block_tables = metadata.block_tables

    def position(self, seq: int, packed: int) -> int:
        """The sequence position of packed token ``packed`` of sequence ``seq``."""
        first = self.seq_lens[seq] - (self.starts[seq + 1] - self.starts[seq])
        return first + packed - self.starts[seq]
