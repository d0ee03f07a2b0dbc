"""Pooling parameters of one request, validated when the request is made.

Names follow vLLM's ``PoolingParams``: ``normalize`` (L2, for embeddings), ``dimensions``
(Matryoshka: keep the first N values, then normalize), ``activation`` (classifier outputs:
sigmoid for one label, softmax for several). ``pooling_type`` overrides the model's pooling for
one request. ``task`` and ``segment_start`` are set by the API (``LLM.embed``/``score``, the
server routes), not by users.
"""

from __future__ import annotations

from dataclasses import dataclass

from pagoda.errors import RequestError

POOLING_TYPES = ("LAST", "MEAN", "CLS", "ALL")  # ALL: one vector per token (LLM.encode)
TASKS = ("encode", "embed", "classify", "score")


@dataclass
class PoolingParams:
    """How to turn one prompt's hidden states into its output vector."""

    normalize: bool | None = None  # L2-normalize; None: on for embed (as the model's config says), off for encode
    dimensions: int | None = None  # keep the first N values (Matryoshka embeddings), before normalizing
    pooling_type: str | None = None  # LAST | MEAN | CLS | ALL; None: the model's
    activation: bool | None = None  # classifiers: sigmoid (1 label) or softmax; None: on for classify/score
    task: str = "encode"  # set by the API: encode | embed | classify | score
    segment_start: int | None = None  # text pairs (cross-encoders): index of the second text's first token

    def __post_init__(self) -> None:
        if self.pooling_type is not None:
            if not isinstance(self.pooling_type, str) or self.pooling_type.upper() not in POOLING_TYPES:
                raise RequestError(f"pooling_type must be one of {', '.join(POOLING_TYPES)}, got {self.pooling_type!r}")
            self.pooling_type = self.pooling_type.upper()
        if self.dimensions is not None and (not isinstance(self.dimensions, int) or isinstance(self.dimensions, bool)
                                            or self.dimensions < 1):
            raise RequestError(f"dimensions must be an int >= 1, got {self.dimensions!r}")
        if self.task not in TASKS:
            raise RequestError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        for name in ("normalize", "activation"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise RequestError(f"{name} must be true, false or None, got {value!r}")
        if self.segment_start is not None and (not isinstance(self.segment_start, int) or self.segment_start < 1):
            raise RequestError(f"segment_start must be an int >= 1, got {self.segment_start!r}")

    def resolved_normalize(self, model_default: bool) -> bool:
        """Whether the output is L2-normalized: the request's choice, else the task's default."""
        if self.normalize is not None:
            return self.normalize
        return model_default if self.task == "embed" else False

    def resolved_activation(self) -> bool:
        if self.activation is not None:
            return self.activation
        return self.task in ("classify", "score")
