"""AttentionBackend: attention over the paged KV cache for a mixed prefill/decode batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import torch

from pagoda.interfaces.base import Capability
from pagoda.interfaces.platform import Platform


@dataclass(frozen=True)
class AttentionSpec:
    """The per-layer shape an attention backend must support."""

    num_heads: int
    num_kv_heads: int
    head_size: int
    scale: float
    block_size: int
    dtype: torch.dtype  # of q/k/v and the KV cache
    sliding_window: int | None = None


@dataclass
class AttentionMetadata:
    """Batch layout for one step, built once by the model runner and shared by all layers.

    Tokens of all sequences are packed along one axis (``num_tokens``); sequence ``i`` owns
    query tokens ``query_start_loc[i]:query_start_loc[i+1]``, which are the last
    ``query_len`` of its ``seq_lens[i]`` context tokens. Decodes are sequences with query_len 1.
    """

    slot_mapping: torch.Tensor  # [num_tokens] int64, flat slot in the cache (block * block_size + offset)
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, padded with 0
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    seq_lens: torch.Tensor  # [num_seqs] int32, context length including this step's tokens
    max_query_len: int
    max_seq_len: int
    num_decodes: int = 0  # the first num_decodes sequences have query_len == 1 (runner orders them)
    extra: object = None  # whatever a backend's prepare() adds

    @property
    def num_seqs(self) -> int:
        return int(self.seq_lens.shape[0])


class AttentionBackend(Capability, ABC):
    """One instance per engine, shared by all layers (layers differ only by their KV cache).

    Contract: ``forward`` writes this step's ``key``/``value`` into ``kv_cache`` at
    ``metadata.slot_mapping`` and returns attention of ``query`` over each sequence's full
    context (causal within the new tokens). A backend with ``supports_graphs = True`` must not
    synchronise with the host or branch on tensor values inside ``forward``.
    """

    supports_graphs: ClassVar[bool] = False
    kv_cache_dtypes: ClassVar[tuple[str, ...]] = ("auto",)  # --kv-cache-dtype values it stores (auto: model dtype)

    def __init__(self, spec: AttentionSpec, platform: Platform) -> None:
        self.spec = spec
        self.platform = platform

    @classmethod
    def check(cls, platform: Platform, spec: AttentionSpec | None = None) -> str | None:
        """``None`` if this backend runs on ``platform`` for ``spec``, else the reason."""
        return None

    def kv_cache_shape(self, num_blocks: int) -> tuple[int, ...]:
        """Shape of one layer's cache; default ``[2, num_blocks, block_size, num_kv_heads, head_size]``."""
        s = self.spec
        return (2, num_blocks, s.block_size, s.num_kv_heads, s.head_size)

    def prepare(self, metadata: AttentionMetadata) -> AttentionMetadata:
        """Called once per step before the layers run: derive backend-specific fields."""
        return metadata

    @abstractmethod
    def forward(
        self,
        query: torch.Tensor,  # [num_tokens, num_heads, head_size]
        key: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        value: torch.Tensor,  # [num_tokens, num_kv_heads, head_size]
        kv_cache: torch.Tensor,  # kv_cache_shape(num_blocks)
        metadata: AttentionMetadata,
    ) -> torch.Tensor:  # [num_tokens, num_heads, head_size]
        """Write k/v into the paged cache, then attend."""
