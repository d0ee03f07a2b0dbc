"""The token bitmask format of guided decoding, and how it masks logits (backend-independent)."""

from __future__ import annotations

import torch

WORD_BITS = 32


def bitmask_words(vocab_size: int) -> int:
    """int32 words per row: ``ceil(vocab_size / 32)``."""
    return (vocab_size + WORD_BITS - 1) // WORD_BITS


def allocate_bitmask(num_rows: int, vocab_size: int) -> torch.Tensor:
    """``[num_rows, words]`` int32 on the CPU, every token allowed (all bits set)."""
    return torch.full((num_rows, bitmask_words(vocab_size)), -1, dtype=torch.int32)


def apply_bitmask(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
    """Set, in place, the logits of tokens a row's bitmask forbids to -inf.

    ``logits`` is ``[N, V]`` on any device; ``bitmask[i]`` (CPU int32) belongs to ``logits[rows[i]]``.
    """
    vocab, device = logits.shape[1], logits.device
    words = bitmask[: len(rows)].to(device, non_blocking=True)  # [M, words]: 32x fewer bytes to copy than a bool mask
    if words.shape[1] * WORD_BITS < vocab:
        raise ValueError(f"a bitmask of {words.shape[1]} words covers {words.shape[1] * WORD_BITS} tokens, "
                         f"but the logits have {vocab}: build the backend with vocab_size={vocab}")
    bits = torch.arange(WORD_BITS, dtype=torch.int32, device=device)  # [32]
    allowed = ((words[:, :, None] >> bits) & 1).reshape(len(rows), -1)[:, :vocab].bool()  # [M, V]
    index = torch.tensor(rows, dtype=torch.long).to(device, non_blocking=True)  # [M]
    logits[index] = logits[index].masked_fill_(~allowed, float("-inf"))
