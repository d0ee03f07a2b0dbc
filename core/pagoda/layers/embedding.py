"""Token embedding and the LM head (kept dense: not routed through the quantization method)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pagoda.layers.linear import copy_checked


class VocabEmbedding(nn.Module):
    """``input_ids`` [num_tokens] -> [num_tokens, hidden_size]."""

    def __init__(self, num_embeddings: int, embedding_dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, dtype=dtype), requires_grad=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight)

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        copy_checked(getattr(self, param_name).data, tensor)


class LMHead(nn.Module):
    """``hidden`` [n, hidden_size] -> float32 logits [n, vocab_size]; may share the embedding."""

    def __init__(
        self, vocab_size: int, hidden_size: int, dtype: torch.dtype, tied: VocabEmbedding | None = None
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        if tied is not None:
            self.weight = tied.weight  # the same Parameter: loaded once, stored once
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size, dtype=dtype), requires_grad=False)
        self.tied = tied is not None

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden.to(self.weight.dtype), self.weight).float()

    def load_weight(self, param_name: str, tensor: torch.Tensor, shard_id: str | None = None) -> None:
        copy_checked(getattr(self, param_name).data, tensor)
