"""Pool one step's hidden states into one output per pooling request, on the device.

Each pooling request's prompt runs whole in one step, so its tokens are one contiguous slice
``[start, end)`` of the step's packed hidden states. The pooler picks the vector(s) per request
(CLS: the first token; LAST: the last; MEAN: the average; ALL: every token), applies the model's
head (a classifier's label logits), then per request: keep the first ``dimensions`` values and
L2-normalize (embeddings), or apply sigmoid/softmax (classifier outputs). Requests that share
their settings are processed together; the results leave as one flat float32 tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from pagoda.pooling.config import PoolerConfig
from pagoda.pooling_params import PoolingParams

Head = Callable[[torch.Tensor], torch.Tensor]  # [n, hidden] -> [n, outputs]


@dataclass(frozen=True)
class PoolingRow:
    """One request to pool: its tokens ``[start, end)`` in the step's packed batch."""

    request_id: str
    start: int
    end: int
    params: PoolingParams


@dataclass
class PooledBatch:
    """One step's pooled outputs, still on the device: ``data`` holds them flat, in row order."""

    request_ids: list[str]
    shapes: list[tuple[int, ...]]
    data: torch.Tensor  # [sum of the shapes' sizes] float32

    def split(self, host: torch.Tensor) -> dict[str, tuple[bytes, list[int]]]:
        """Per request id: (float32 bytes, shape) from ``host``, the host copy of ``data``."""
        flat = host.numpy()
        out, offset = {}, 0
        for request_id, shape in zip(self.request_ids, self.shapes):
            size = math.prod(shape)
            out[request_id] = (flat[offset : offset + size].tobytes(), list(shape))
            offset += size
        return out


class Pooler:
    """Pools hidden states by a model's :class:`PoolerConfig`; ``head`` maps pooled vectors to outputs."""

    def __init__(self, config: PoolerConfig, head: Head | None = None) -> None:
        self.config = config
        self.head = head if config.num_labels else None

    def pooling_type(self, params: PoolingParams) -> str:
        """The request's pooling type (a classifier always pools as its head was trained)."""
        if self.config.num_labels or params.pooling_type is None:
            return self.config.pooling_type
        return params.pooling_type

    def __call__(self, hidden: torch.Tensor, rows: list[PoolingRow]) -> PooledBatch:
        """``hidden``: [num_tokens, hidden_size] of the step; one output per row, in row order."""
        groups = self._groups(rows)
        request_ids = [r.request_id for r in rows]
        if len(groups) == 1 and next(iter(groups))[0] != "ALL":  # the usual step: every request alike
            pooled = self._pool_group(hidden, rows, next(iter(groups)))  # [n, outputs]
            return PooledBatch(request_ids, [tuple(pooled.shape[1:])] * len(rows), pooled.reshape(-1))
        results: list[torch.Tensor | None] = [None] * len(rows)
        for key, members in groups.items():
            for i, tensor in zip(members, self._pool_group(hidden, [rows[i] for i in members], key)):
                results[i] = tensor
        data = torch.cat([r.reshape(-1) for r in results]) if results else hidden.new_zeros(0, dtype=torch.float32)
        return PooledBatch(request_ids, [tuple(r.shape) for r in results], data)

    def _groups(self, rows: list[PoolingRow]) -> dict[tuple, list[int]]:
        """Row indices by their pooling settings (the requests of one call share one params object)."""
        keys: dict[int, tuple] = {}
        groups: dict[tuple, list[int]] = {}
        for i, row in enumerate(rows):
            key = keys.get(id(row.params))
            if key is None:
                key = keys[id(row.params)] = self._key(row.params)
            groups.setdefault(key, []).append(i)
        return groups

    def _key(self, params: PoolingParams) -> tuple:
        return (self.pooling_type(params), params.dimensions, params.resolved_normalize(self.config.normalize),
                params.resolved_activation())

    def _pool_group(self, hidden: torch.Tensor, rows: list[PoolingRow],
                    key: tuple) -> torch.Tensor | list[torch.Tensor]:
        """[n, outputs] float32, or (pooling type ALL) one [num_tokens, outputs] tensor per row."""
        pooling_type, dimensions, normalize, activation = key
        if pooling_type == "ALL":  # token vectors: no head, no activation
            return [_finish(hidden[r.start : r.end].float(), dimensions, normalize) for r in rows]
        vectors = _select(hidden, rows, pooling_type)  # [n, hidden] float32
        if self.head is not None:
            logits = self.head(vectors).float()  # [n, num_labels]
            return _activate(logits) if activation else logits
        return _finish(vectors, dimensions, normalize)


def _select(hidden: torch.Tensor, rows: list[PoolingRow], pooling_type: str) -> torch.Tensor:
    """[n, hidden] float32: the first / last / mean token state of each row."""
    if pooling_type in ("CLS", "LAST"):
        index = [r.start if pooling_type == "CLS" else r.end - 1 for r in rows]
        return hidden[torch.tensor(index, device=hidden.device)].float()
    lens = torch.tensor([r.end - r.start for r in rows], device=hidden.device)
    # unsafe: skip the checks of the lengths (each a device sync); they are >= 1 and add up by construction
    return torch.segment_reduce(_tokens_of(hidden, rows).float(), "mean", lengths=lens, unsafe=True)


def _tokens_of(hidden: torch.Tensor, rows: list[PoolingRow]) -> torch.Tensor:
    """The rows' token states, back to back: a slice when the rows are adjacent (a whole step)."""
    if all(a.end == b.start for a, b in zip(rows, rows[1:])):
        return hidden[rows[0].start : rows[-1].end]
    tokens = np.concatenate([np.arange(r.start, r.end) for r in rows])
    return hidden[torch.from_numpy(tokens).to(hidden.device)]


def _finish(vectors: torch.Tensor, dimensions: int | None, normalize: bool) -> torch.Tensor:
    """Keep the first ``dimensions`` values of the last axis, then L2-normalize it if asked."""
    if dimensions is not None:
        vectors = vectors[..., :dimensions]
    return F.normalize(vectors, p=2, dim=-1) if normalize else vectors


def _activate(logits: torch.Tensor) -> torch.Tensor:
    """Sigmoid for a single label (a relevance score), else softmax over the labels."""
    return torch.sigmoid(logits) if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1)
