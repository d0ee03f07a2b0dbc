"""The Triton kernel that applies a guided-decoding token bitmask to logits in one launch.

Imported lazily (only for logits on a GPU, with triton installed); plain Triton source, so it
compiles for CUDA and ROCm alike and runs on CPU tensors under ``TRITON_INTERPRET=1`` in tests.
Each program covers ``BLOCK`` tokens of one masked row: it loads their bitmask words and stores
``-inf`` where a token's bit is clear; allowed logits are neither read nor written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pagoda.triton_support import interpreting


@triton.jit
def _forbid_kernel(logits_ptr, words_ptr, index_ptr, vocab_size, logits_row_stride, num_words,
                   HAS_INDEX: tl.constexpr, BLOCK: tl.constexpr):
    """logits[index[i], t] = -inf where bit t % 32 of words[i, t // 32] is 0, for t in this block."""
    i = tl.program_id(0)
    tokens = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    in_vocab = tokens < vocab_size
    if HAS_INDEX:
        row = tl.load(index_ptr + i).to(tl.int64)
    else:
        row = i.to(tl.int64)
    word = tl.load(words_ptr + i * num_words + tokens // 32, mask=in_vocab, other=-1)  # [BLOCK] int32
    forbidden = ((word >> (tokens % 32)) & 1) == 0
    ninf = tl.full([BLOCK], float("-inf"), logits_ptr.dtype.element_ty)
    tl.store(logits_ptr + row * logits_row_stride + tokens, ninf, mask=in_vocab & forbidden)


def apply_bitmask_triton(logits: torch.Tensor, words: torch.Tensor, index: torch.Tensor | None) -> None:
    """``logits``: ``[N, V]`` (last dim contiguous); ``words``: ``[M, ceil(V / 32)]`` int32 on its
    device; ``index``: ``[M]`` int64 rows of ``logits`` (None: rows ``0..M-1``)."""
    if logits.stride(1) != 1:
        raise ValueError("logits must be contiguous along the vocabulary")
    words = words.contiguous()
    num_rows, vocab = words.shape[0], logits.shape[1]
    if num_rows == 0:
        return
    block = 1024 if interpreting() else 4096  # the interpreter runs every lane
    grid = (num_rows, triton.cdiv(vocab, block))
    _forbid_kernel[grid](logits, words, index if index is not None else words, vocab, logits.stride(0),
                         words.shape[1], HAS_INDEX=index is not None, BLOCK=block)
