"""The built-in ``torch`` attention backend: a readable reference over the paged KV cache.

Decodes are attended in one batched call (keys gathered through the block tables, padded and
masked); each prefill (possibly a chunk after a cached prefix) runs one masked SDPA call.
Encoder layers (``spec.causal`` False: whole prompts, no cached prefix) attend over the step's
own keys in one padded SDPA call.
With ``spec.logits_soft_cap`` the scores are computed explicitly (SDPA cannot cap them).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata, AttentionSpec
from pagoda.interfaces.platform import Platform


class TorchAttentionBackend(AttentionBackend):
    description = "reference attention in plain torch (CPU and any device; slow)"
    priority = 0
    supports_non_causal = True  # encoder models (AttentionSpec.causal=False)
    supports_mixed_windows = True  # forward reads spec.sliding_window only
    supports_logits_soft_cap = True

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        super().__init__(spec, platform)
        self.ops = platform.custom_ops()  # the platform's KV-write kernel

    def forward(self, query, key, value, kv_cache, metadata: AttentionMetadata) -> torch.Tensor:
        self.ops.reshape_and_cache(key, value, kv_cache, metadata.slot_mapping)
        if not self.spec.causal:  # encoders: every prompt is whole in this step, so attend over q/k/v directly
            return self._attend_whole(query, key, value, metadata.query_start_loc)
        out = torch.empty_like(query)
        starts = metadata.query_start_loc.tolist()
        seq_lens = metadata.seq_lens.tolist()
        d = metadata.num_decodes
        if d:
            out[:d] = self._attend(query[:d, None], kv_cache, metadata.block_tables[:d], seq_lens[:d], 1)[:, 0]
        for i in range(d, metadata.num_seqs):
            q = query[starts[i] : starts[i + 1]]
            out[starts[i] : starts[i + 1]] = self._attend(
                q[None], kv_cache, metadata.block_tables[i : i + 1], seq_lens[i : i + 1], q.shape[0]
            )[0]
        return out

    def _attend(self, q, kv_cache, block_tables, seq_lens: list[int], q_len: int) -> torch.Tensor:
        """``q``: [batch, q_len, heads, d]; each sequence's queries are its last q_len positions."""
        s = self.spec
        max_len = max(seq_lens)
        num_blocks = -(-max_len // s.block_size)
        blocks = block_tables[:, :num_blocks].long()  # [batch, num_blocks]
        k = kv_cache[0][blocks].flatten(1, 2)[:, :max_len]  # [batch, max_len, kv_heads, d]
        v = kv_cache[1][blocks].flatten(1, 2)[:, :max_len]
        mask = self._mask(torch.tensor(seq_lens, device=q.device), q_len, max_len)
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # [batch, kv_heads, max_len, d]
        if s.logits_soft_cap:
            out = _soft_capped_attention(q.transpose(1, 2).to(k.dtype), k, v, mask[:, None], s.scale, s.logits_soft_cap)
        else:
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2).to(k.dtype), k, v, attn_mask=mask[:, None], scale=s.scale, enable_gqa=True
            )
        return out.transpose(1, 2).to(q.dtype)

    def _attend_whole(self, query, key, value, query_start_loc: torch.Tensor) -> torch.Tensor:
        """Bidirectional attention of whole sequences in one padded SDPA call (no cache read)."""
        starts = query_start_loc.long()  # [num_seqs + 1]
        lens = starts[1:] - starts[:-1]  # [num_seqs]
        seq = torch.repeat_interleave(torch.arange(len(lens), device=lens.device), lens)  # [num_tokens]
        col = torch.arange(query.shape[0], device=lens.device) - starts[seq]  # each token's offset in its sequence
        width = int(lens.max())

        def padded(x: torch.Tensor) -> torch.Tensor:  # [num_tokens, h, d] -> [num_seqs, h, width, d]
            out = x.new_zeros(len(lens), width, *x.shape[1:])
            out[seq, col] = x
            return out.transpose(1, 2)

        valid = torch.arange(width, device=lens.device)[None, :] < lens[:, None]  # [num_seqs, width] real keys
        out = F.scaled_dot_product_attention(padded(query), padded(key), padded(value), attn_mask=valid[:, None, None],
                                             scale=self.spec.scale, enable_gqa=key.shape[1] != query.shape[1])
        return out.transpose(1, 2)[seq, col]  # [num_tokens, heads, d]

    def _mask(self, seq_lens: torch.Tensor, q_len: int, max_len: int) -> torch.Tensor:
        """[batch, q_len, max_len] bool: causal, within length, within the sliding window."""
        key_pos = torch.arange(max_len, device=seq_lens.device)[None, None, :]
        q_pos = (seq_lens[:, None] - q_len + torch.arange(q_len, device=seq_lens.device)[None, :])[..., None]
        mask = key_pos <= q_pos
        if self.spec.sliding_window:
            mask &= key_pos > q_pos - self.spec.sliding_window
        return mask


def _soft_capped_attention(
    q: torch.Tensor,  # [batch, heads, q_len, d]
    k: torch.Tensor,  # [batch, kv_heads, max_len, d]
    v: torch.Tensor,  # [batch, kv_heads, max_len, d]
    mask: torch.Tensor,  # [batch, 1, q_len, max_len] bool
    scale: float,
    cap: float,
) -> torch.Tensor:  # [batch, heads, q_len, d]
    """softmax(cap * tanh(q k^T * scale / cap)) v in float32, with GQA by repeating the kv heads."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1).float(), v.repeat_interleave(group, dim=1).float()
    scores = torch.matmul(q.float(), k.transpose(-1, -2)) * scale  # [batch, heads, q_len, max_len]
    scores = torch.tanh(scores / cap) * cap
    probs = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return torch.matmul(probs, v).to(q.dtype)
