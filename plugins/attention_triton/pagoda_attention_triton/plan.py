"""Per-step launch plan: what ``prepare()`` derives once and every layer reuses."""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_KEYS_PER_SPLIT = 256
PROGRAMS_PER_SM = 2  # batch 1 at 32k: 32 splits beat 64 and 128 (H200, graph replays)
MIN_SPLIT_CONTEXT = 1024  # at 512 tokens splitting measured slower (launch-bound either way)
MAX_SPLITS = 64


@dataclass
class StepPlan:
    """Static launch parameters of one step (kept in ``AttentionMetadata.extra``)."""

    num_splits: int  # KV partitions per decode sequence (1: no split-KV)
    decode_scratch: tuple[torch.Tensor, torch.Tensor] | None  # shared by all layers of the step


def choose_num_splits(num_decodes: int, num_kv_heads: int, max_seq_len: int, num_sms: int) -> int:
    """Split the KV of decodes only when ``num_decodes * num_kv_heads`` programs underfill the GPU.

    Aims at about ``PROGRAMS_PER_SM`` programs per multiprocessor, each with at least ``MIN_KEYS_PER_SPLIT`` keys;
    a power of two, at most ``MAX_SPLITS``.
    """
    programs = num_decodes * num_kv_heads
    if programs == 0 or programs >= num_sms or max_seq_len < MIN_SPLIT_CONTEXT:
        return 1
    wanted = min(-(-PROGRAMS_PER_SM * num_sms // programs), max_seq_len // MIN_KEYS_PER_SPLIT, MAX_SPLITS)
    splits = 1
    while splits * 2 <= wanted:
        splits *= 2
    return splits
