"""The pool of KV cache blocks: ref counts, an LRU of free blocks, and the prefix-cache map.

A block is *free* when no request holds it (``ref_count == 0``). Free blocks keep their hash, so
a later request with the same prefix can take them back ("hit"); allocation takes the least
recently freed block and only then forgets its hash (eviction). Every method costs
O(blocks it is given or returns).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class KVBlock:
    """One block of ``block_size`` KV slots. ``block_hash`` is set while it is in the prefix cache."""

    block_id: int
    ref_count: int = 0
    block_hash: int | None = None


class BlockPool:
    """Owns all ``num_blocks`` blocks.

    ``_free`` is an LRU ordered dict (block id -> block): allocation pops from its head, freeing
    appends to its tail, and a cache hit on a free block removes it from the middle in O(1).
    ``_cached`` maps a block hash to the one block holding that content (no duplicates).
    """

    def __init__(self, num_blocks: int) -> None:
        if num_blocks <= 0:
            raise ValueError(f"num_blocks must be positive, got {num_blocks}")
        self.blocks = [KVBlock(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, KVBlock] = OrderedDict((b.block_id, b) for b in self.blocks)
        self._cached: dict[int, KVBlock] = {}

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_cached_blocks(self) -> int:
        return len(self._cached)

    def free_block_ids(self) -> list[int]:
        """Free block ids in eviction order (next to be allocated first). O(free blocks): for tests."""
        return list(self._free)

    def get_cached(self, block_hash: int) -> KVBlock | None:
        """The block holding content ``block_hash``, free or in use, if cached."""
        return self._cached.get(block_hash)

    def allocate(self, n: int) -> list[KVBlock]:
        """Take ``n`` blocks from the LRU head (evicting their hashes), each with one reference."""
        if n > len(self._free):
            raise RuntimeError(f"cannot allocate {n} blocks: only {len(self._free)} free")
        taken = []
        for _ in range(n):
            _, block = self._free.popitem(last=False)
            self._evict(block)
            block.ref_count = 1
            taken.append(block)
        return taken

    def touch(self, blocks: Iterable[KVBlock]) -> None:
        """Take one more reference on each block (cache hits); a free one leaves the free queue."""
        for block in blocks:
            if block.ref_count == 0:
                del self._free[block.block_id]
            block.ref_count += 1

    def release(self, blocks: Sequence[KVBlock]) -> None:
        """Drop one reference on each block, given in block-table order.

        Blocks reaching zero join the free queue's tail in *reverse* table order, so a prefix's
        tail is evicted before its head (the head is the part other prompts are likeliest to share).
        """
        for block in reversed(blocks):
            block.ref_count -= 1
            if block.ref_count < 0:
                raise RuntimeError(f"block {block.block_id} released more often than taken")
            if block.ref_count == 0:
                self._free[block.block_id] = block

    def cache(self, block: KVBlock, block_hash: int) -> bool:
        """Record that ``block`` holds content ``block_hash``; False if another block already does."""
        if block.block_hash is not None or block_hash in self._cached:
            return False
        block.block_hash = block_hash
        self._cached[block_hash] = block
        return True

    def reset_prefix_cache(self) -> None:
        """Forget every cached hash (blocks in use keep their contents, just not shareable)."""
        for block in self._cached.values():
            block.block_hash = None
        self._cached.clear()

    def _evict(self, block: KVBlock) -> None:
        if block.block_hash is not None:
            if self._cached.get(block.block_hash) is block:
                del self._cached[block.block_hash]
            block.block_hash = None
