"""Per-step launch plan of the flash backend: what ``prepare()`` derives once for all layers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_KEYS_PER_SPLIT = 256
CTAS_PER_SM = 2  # aim: about two decode CTAs per multiprocessor
MIN_SPLIT_CONTEXT = 1024  # shorter contexts are launch-bound: a reduce kernel costs more than it saves
MAX_SPLITS = 64


@dataclass
class FlashPlan:
    """Static launch parameters of one step (kept in ``AttentionMetadata.extra``)."""

    num_splits: int  # KV partitions per decode sequence (1: no split-KV, no scratch)
    part_out: torch.Tensor | None  # [num_decodes, num_heads, num_splits, head_size] fp32
    part_lse: torch.Tensor | None  # [num_decodes, num_heads, num_splits] fp32


def heads_per_cta(num_heads: int, num_kv_heads: int) -> int:
    """Query heads one decode CTA serves from each K/V read (mirrors ``decode_heads_per_cta`` in
    csrc/attention/decode_kernels.cu): the largest of 8/4/2/1 dividing the GQA group."""
    group = num_heads // num_kv_heads
    return next(h for h in (8, 4, 2, 1) if group % h == 0)


def choose_num_splits(num_decodes: int, num_heads: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """Split decodes' KV only when their CTAs underfill the GPU; a power of two up to ``MAX_SPLITS``,
    each split at least ``MIN_KEYS_PER_SPLIT`` keys. Any value is correct; this is for speed."""
    ctas = num_decodes * (num_heads // heads_per_cta(num_heads, num_kv_heads))
    if ctas == 0 or ctas >= num_sms or max_seq_len < MIN_SPLIT_CONTEXT:
        return 1
    wanted = min(-(-CTAS_PER_SM * num_sms // ctas), max_seq_len // MIN_KEYS_PER_SPLIT, MAX_SPLITS)
    splits = 1
    while splits * 2 <= wanted:
        splits *= 2
    return splits


def make_plan(num_decodes: int, num_heads: int, head_size: int, num_splits: int, device: torch.device) -> FlashPlan:
    """The plan with its split-KV scratch (allocated here, never in ``forward``: graph safe)."""
    if num_splits <= 1 or num_decodes == 0:
        return FlashPlan(1, None, None)
    part_out = torch.empty(num_decodes, num_heads, num_splits, head_size, dtype=torch.float32, device=device)
    part_lse = torch.empty(num_decodes, num_heads, num_splits, dtype=torch.float32, device=device)
    return FlashPlan(num_splits, part_out, part_lse)
