"""Whole blocks (every layer of this rank) between the device's KV cache and host tensors.

All of it is queued beside the compute stream (``Platform.side_work``: the platform's transfer stream on
GPUs, in place on CPUs), through a device staging buffer of ``chunk`` blocks: to the device, each host block
is one contiguous copy into the staging buffer, then one scatter kernel per layer puts the chunk's blocks in
place; to the host, one gather kernel per layer, then one contiguous copy per block. Elements move as raw
bits (an FP8 cache moves as bytes), so every cache dtype moves alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pagoda.interfaces.kv_connector import KVCacheLayout
from pagoda.interfaces.platform import Platform, SideWork

CHUNK_BYTES = 64 << 20  # device staging memory (beside the KV cache)
MAX_CHUNK = 256
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def as_bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as integers of its element size (a copy of those is a copy of the bits)."""
    return t.view(BITS[t.element_size()])


class BlockMover:
    """Copies blocks of ``kv_caches`` (one tensor per layer, blocks along ``axis``) to and from host tensors."""

    def __init__(self, kv_caches: list[torch.Tensor], axis: int, layout: KVCacheLayout, platform: Platform,
                 chunk_bytes: int = CHUNK_BYTES) -> None:
        self.caches = [as_bits(c) for c in kv_caches]
        self.axis = axis
        self.platform = platform
        self.device = kv_caches[0].device
        self.chunk = max(1, min(MAX_CHUNK, chunk_bytes // layout.block_bytes))
        # [chunk, layers, *layer_block_shape]
        self.staging = torch.empty((self.chunk, *layout.block_shape), dtype=self.caches[0].dtype, device=self.device)

    def to_device(self, block_ids: Sequence[int], sources: Sequence[torch.Tensor]) -> SideWork:
        """Copy ``sources[i]`` (host, one block each) into device block ``block_ids[i]``."""
        with self.platform.side_work() as work:
            for start in range(0, len(block_ids), self.chunk):
                ids = block_ids[start : start + self.chunk]
                staged = self.staging[: len(ids)]
                for i, source in enumerate(sources[start : start + self.chunk]):
                    staged[i].copy_(as_bits(source), non_blocking=True)
                index = self._index(ids)
                for layer, cache in enumerate(self.caches):
                    cache.index_copy_(self.axis, index, staged[:, layer].movedim(0, self.axis))
        return work

    def to_host(self, block_ids: Sequence[int], target: torch.Tensor) -> SideWork:
        """Copy device block ``block_ids[i]`` into ``target[i]`` (host, ``[len(block_ids), *block_shape]``): one
        copy per chunk."""
        target = as_bits(target)
        with self.platform.side_work() as work:
            for start in range(0, len(block_ids), self.chunk):
                ids = block_ids[start : start + self.chunk]
                staged = self.staging[: len(ids)]
                index = self._index(ids)
                for layer, cache in enumerate(self.caches):
                    staged[:, layer].copy_(cache.index_select(self.axis, index).movedim(self.axis, 0))
                target[start : start + len(ids)].copy_(staged, non_blocking=True)
        return work

    def _index(self, block_ids: Sequence[int]) -> torch.Tensor:
        return torch.tensor(block_ids, dtype=torch.int64).to(self.device, non_blocking=True)
