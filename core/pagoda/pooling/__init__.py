"""Pooling models (``runner="pooling"``): embeddings, classification and scores (docs/pooling.md)."""

from pagoda.pooling.outputs import (ClassificationOutput, ClassificationRequestOutput, EmbeddingOutput,
                                    EmbeddingRequestOutput, PoolingOutput, PoolingRequestOutput, ScoringOutput,
                                    ScoringRequestOutput)
from pagoda.pooling_params import POOLING_TYPES, PoolingParams

__all__ = [
    "POOLING_TYPES",
    "ClassificationOutput",
    "ClassificationRequestOutput",
    "EmbeddingOutput",
    "EmbeddingRequestOutput",
    "PoolingOutput",
    "PoolingParams",
    "PoolingRequestOutput",
    "ScoringOutput",
    "ScoringRequestOutput",
]
