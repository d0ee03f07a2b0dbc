"""What ``LLM.encode``/``embed``/``classify``/``score`` return (vLLM's names and shapes).

``PoolingRequestOutput.outputs.data`` is the raw pooled tensor; the task views wrap it:
``EmbeddingRequestOutput.outputs.embedding`` (a list of floats),
``ClassificationRequestOutput.outputs.probs`` and ``ScoringRequestOutput.outputs.score``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import torch

T = TypeVar("T")


@dataclass
class PoolingOutput:
    data: torch.Tensor  # [dims] float32 (or [num_tokens, dims] for pooling_type ALL)


@dataclass
class EmbeddingOutput:
    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class ClassificationOutput:
    probs: list[float]  # per label: probabilities (activation on) or logits

    @property
    def num_classes(self) -> int:
        return len(self.probs)


@dataclass
class ScoringOutput:
    score: float


@dataclass
class PoolingRequestOutput(Generic[T]):
    """One prompt's pooled result (``outputs`` is one object, not a list, as in vLLM)."""

    request_id: str
    outputs: T
    prompt_token_ids: list[int]
    finished: bool = True
    prompt: str | None = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(request_id={self.request_id!r}, outputs={self.outputs!r}, "
                f"num_prompt_tokens={len(self.prompt_token_ids)})")


class EmbeddingRequestOutput(PoolingRequestOutput[EmbeddingOutput]):
    @classmethod
    def from_base(cls, out: PoolingRequestOutput[PoolingOutput]) -> "EmbeddingRequestOutput":
        return cls(out.request_id, EmbeddingOutput(out.outputs.data.tolist()), out.prompt_token_ids, out.finished,
                   out.prompt)


class ClassificationRequestOutput(PoolingRequestOutput[ClassificationOutput]):
    @classmethod
    def from_base(cls, out: PoolingRequestOutput[PoolingOutput]) -> "ClassificationRequestOutput":
        return cls(out.request_id, ClassificationOutput(out.outputs.data.tolist()), out.prompt_token_ids,
                   out.finished, out.prompt)


class ScoringRequestOutput(PoolingRequestOutput[ScoringOutput]):
    @classmethod
    def of(cls, request_id: str, score: float, prompt_token_ids: list[int]) -> "ScoringRequestOutput":
        return cls(request_id, ScoringOutput(float(score)), prompt_token_ids)


def pooled_tensor(data: bytes, shape: list[int]) -> torch.Tensor:
    """The float32 tensor an engine core sent as bytes (a copy: the buffer stays read-only)."""
    return torch.from_numpy(np.frombuffer(data, dtype=np.float32).reshape(shape).copy())
