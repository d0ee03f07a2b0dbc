"""Multi-head latent attention in plain torch: the torch backend's ``forward_mla`` and the tests' reference.

The cache of a layer is ``[num_blocks, block_size, latent_size]``: one row per token, the normalised kv
latent (``kv_lora_rank`` values) then the rotated rope key. Queries arrive absorbed (``latent_size`` values
per head), so every head scores the same rows and the values are the rows' first ``kv_lora_rank`` entries
(see :class:`pagoda.interfaces.attention.MLASpec`).
"""

from __future__ import annotations

import torch


def write_latent(latent: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """Store ``latent`` ``[num_tokens, latent_size]`` at ``slot_mapping`` (negative slots: padding, skipped)."""
    rows = kv_cache.view(-1, kv_cache.shape[-1])  # [num_blocks * block_size, latent_size]
    valid = slot_mapping >= 0
    rows[slot_mapping[valid].long()] = latent[valid].to(rows.dtype)


def gather_rows(kv_cache: torch.Tensor, block_tables: torch.Tensor, max_len: int) -> torch.Tensor:
    """The first ``max_len`` cached rows of each sequence: ``[batch, max_len, latent_size]``."""
    num_blocks = -(-max_len // kv_cache.shape[1])
    return kv_cache[block_tables[:, :num_blocks].long()].flatten(1, 2)[:, :max_len]


def latent_attention(
    q: torch.Tensor,  # [batch, q_len, heads, latent_size]
    rows: torch.Tensor,  # [batch, max_len, latent_size]
    mask: torch.Tensor,  # [batch, q_len, max_len] bool: which rows each query sees
    scale: float,
    kv_lora_rank: int,
) -> torch.Tensor:  # [batch, q_len, heads, kv_lora_rank]
    """``softmax(scale * q . row)`` over the visible rows, weighting their first ``kv_lora_rank`` values;
    scores and softmax in float32 (float64 inputs stay float64)."""
    compute = torch.promote_types(q.dtype, torch.float32)
    scores = torch.einsum("bqhd,bkd->bhqk", q.to(compute), rows.to(compute)) * scale  # [batch, heads, q_len, max_len]
    probs = scores.masked_fill(~mask[:, None], float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhqk,bkl->bqhl", probs, rows[..., :kv_lora_rank].to(compute))
    return out.to(q.dtype)
