"""Token embedding and the LM head (kept dense: not routed through the quantization method).

Under tensor parallelism both are vocab-parallel: rank ``r`` keeps rows
``[r * per_rank, (r + 1) * per_rank)`` of the vocabulary (``per_rank = ceil(vocab / tp)``; the
last rank's rows past the vocabulary are zero padding). The embedding looks up the ids in its
rows, zeroes the others and sums over the ranks (one all-reduce); the LM head computes its
rows' logits and gathers them (one all-gather), so every rank holds the full logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.interfaces.parallel import SINGLE, TensorParallel
from pagoda.layers.linear import copy_checked
from pagoda.interfaces.ops import CustomOps
from pagoda.layers.sharding import narrow


class VocabRows:
    """The vocabulary rows one rank keeps."""

    def __init__(self, vocab_size: int, tp: TensorParallel) -> None:
        self.vocab_size = vocab_size
        self.per_rank = -(-vocab_size // tp.size)
        self.start = tp.rank * self.per_rank
        self.count = max(0, min(self.per_rank, vocab_size - self.start))  # real (not padding) rows

    def load(self, weight: torch.Tensor, tensor) -> None:
        """Copy this rank's rows of checkpoint ``tensor`` [vocab, hidden] into ``weight``."""
        if weight.shape[0] == self.vocab_size:
            copy_checked(weight, tensor)
            return
        copy_checked(weight[: self.count], narrow(tensor, 0, self.start, self.count))
        weight[self.count :].zero_()


class VocabEmbedding(nn.Module):
    """``input_ids`` [num_tokens] -> [num_tokens, hidden_size]."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype,
                 tp: TensorParallel = SINGLE, ops: CustomOps | None = None) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.tp = tp
        self.ops = ops or CustomOps()  # its vocab-parallel lookup: the platform's one-kernel masked embedding
        self.rows = VocabRows(num_embeddings, tp)
        self.weight = nn.Parameter(torch.empty(self.rows.per_rank, embedding_dim, dtype=dtype), requires_grad=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp.size == 1:
            return F.embedding(input_ids, self.weight)
        x = self.ops.masked_embedding(input_ids, self.weight, self.rows.start)  # [num_tokens, hidden], others' zero
        return self.tp.all_reduce(x)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        self.rows.load(getattr(self, param_name).data, tensor)


class LMHead(nn.Module):
    """``hidden`` [n, hidden_size] -> float32 logits [n, vocab_size]; may share the embedding."""

    def __init__(
        self, vocab_size: int, hidden_size: int, dtype: torch.dtype, tied: VocabEmbedding | None = None,
        tp: TensorParallel = SINGLE, ops: CustomOps | None = None,
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.tp = tp
        self.ops = ops or CustomOps()  # its linear: the platform's GEMV for a few tokens
        self.rows = VocabRows(vocab_size, tp)
        if tied is not None:
            self.weight = tied.weight  # the same Parameter: loaded once, stored once
        else:
            self.weight = nn.Parameter(torch.empty(self.rows.per_rank, hidden_size, dtype=dtype), requires_grad=False)
        self.tied = tied is not None
        self.packed: torch.Tensor | None = None  # the tied weight in the ops' linear layout (process_weights_...)

    def process_weights_after_loading(self) -> None:
        """Let the platform's ops pack the weight for their ``linear``; a tied weight keeps its dense tensor too
        (the embedding looks rows up in it)."""
        packed = self.ops.pack_linear_weight(self.weight.data)
        if packed is not None and self.tied:
            self.packed = packed
        elif packed is not None:
            self.weight = nn.Parameter(packed, requires_grad=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self.weight if self.packed is None else self.packed
        logits = self.ops.linear(hidden.to(weight.dtype), weight)  # [n, vocab rows of this rank]
        if self.tp.size > 1:
            logits = self.tp.all_gather_last(logits)[:, : self.vocab_size]  # [n, vocab]
        return logits.float()

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        self.rows.load(getattr(self, param_name).data, tensor)
