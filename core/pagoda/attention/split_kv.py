"""Split-KV (flash-decoding) planning shared by the GPU attention backends.

A decode step's ``prepare()`` picks how many slices of the context each decode sequence's KV is
split into, from upper bounds only (``num_decodes``, ``max_seq_len``: fixed for a captured CUDA
graph), and allocates the fp32 scratch the splits write before a reduction combines them. The
plan rides in ``AttentionMetadata.extra`` and every layer of the step reuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_KEYS_PER_SPLIT = 256
PROGRAMS_PER_SM = 2  # batch 1 at 32k: 32 splits beat 64 and 128 (H200, Triton, graph replays)
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
    a power of two, at most ``MAX_SPLITS``. (``num_kv_heads``: programs per sequence, e.g. kv heads
    times the row blocks of a large GQA group.)
    """
    programs = num_decodes * num_kv_heads
    if programs == 0 or programs >= num_sms or max_seq_len < MIN_SPLIT_CONTEXT:
        return 1
    wanted = min(-(-PROGRAMS_PER_SM * num_sms // programs), max_seq_len // MIN_KEYS_PER_SPLIT, MAX_SPLITS)
    splits = 1
    while splits * 2 <= wanted:
        splits *= 2
    return splits


def balance_waves(num_programs: int, num_splits: int, max_seq_len: int, num_sms: int, per_sm: int) -> int:
    """``num_splits``, or more where ``num_programs`` (unsplit) leave a program alone on most SMs.

    With ``per_sm`` programs resident per multiprocessor, an SM that runs a short run of ``n``
    programs of equal length ending with one alone (``n % per_sm == 1``) streams that last one at
    about half its rate (flash's old 2-stage kernel, head 128, 3 per SM on an H100: batch 64 x 8 kv
    heads = 512 programs reached 75-80% of the copy bandwidth, 84-93% split 2 ways, 84-97.5% split 3
    ways; with 3-stage rings, 2 per SM, they run unsplit at 94-100%). Then among 1-3
    splits the one of least modelled time wins: the busiest SM's programs, each ``1/splits`` long,
    a lone last one counted twice. Long runs (``n > 2 * per_sm``) drift out of step and are left
    alone, as are launches that already split (``num_splits > 1``: fewer programs than SMs).
    """
    if num_splits > 1 or per_sm < 2 or num_programs < num_sms:
        return num_splits

    def busiest(splits: int) -> int:  # programs on the busiest SM
        return -(-num_programs * splits // num_sms)

    def lone(splits: int) -> bool:  # a short run that ends with one program alone
        n = busiest(splits)
        return n % per_sm == 1 and n <= 2 * per_sm

    if not lone(1):
        return 1
    allowed = [s for s in (3, 2, 1) if s == 1 or max_seq_len // s >= MIN_KEYS_PER_SPLIT]
    return min(allowed, key=lambda s: (busiest(s) + lone(s)) / s)  # ties: the most splits


def decode_scratch(
    num_decodes: int, num_heads: int, head_size: int, num_splits: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """fp32 partial outputs ``[num_decodes, num_heads, num_splits, head_p]`` and their log2-sum-exp
    ``[num_decodes, num_heads, num_splits]`` (``head_p``: head size rounded up to a power of two), if split."""
    if num_splits <= 1 or num_decodes == 0:
        return None
    head_p = 1 << (head_size - 1).bit_length()
    part_o = torch.empty(num_decodes, num_heads, num_splits, head_p, dtype=torch.float32, device=device)
    part_lse = torch.empty(num_decodes, num_heads, num_splits, dtype=torch.float32, device=device)
    return part_o, part_lse
