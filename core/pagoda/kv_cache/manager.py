"""KVCacheManager: which KV blocks each request holds, with prefix caching over chained hashes.

Block ``i`` of a request holds the KV of tokens ``[i * block_size, (i + 1) * block_size)``.
A full block's hash chains its parent's: ``hash((hash of block i-1 or SEED, tuple(tokens)))``,
so equal hashes mean equal whole prefixes. A request with a LoRA adapter starts its chain from its
adapter's hash instead (:func:`first_parent`): two adapters, or an adapter and the base model, never
share KV for the same tokens. Hashes are computed incrementally into
``request.block_hashes`` (work proportional to new tokens) and a block is registered in the
prefix cache as soon as it is allocated for the step that fills it, so an identical prompt
admitted in the same step can share it (attention backends write a step's KV before reading).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pagoda.kv_cache.block_pool import BlockPool, KVBlock
from pagoda.request import Request

SEED_HASH = hash("pagoda-prefix-cache-v1")  # the "parent" of a request's first block


def hash_block(parent_hash: int | None, token_ids: Sequence[int], content: tuple[str, ...] = ()) -> int:
    """The chained hash of one full block (Python's int/tuple hash: deterministic across runs); ``content``:
    the hashes of the images whose placeholders the block holds (two images behind the same placeholder
    tokens give different blocks)."""
    parent = SEED_HASH if parent_hash is None else parent_hash
    return hash((parent, tuple(token_ids), content)) if content else hash((parent, tuple(token_ids)))


def first_parent(request: Request) -> int | None:
    """The "parent" hash of a request's first block: None (the seed) for the base model, else its adapter's
    (name, id and folder: an id given to another adapter later keys other blocks)."""
    lora = request.lora_request
    return None if lora is None else hash((SEED_HASH, "lora", lora.lora_name, lora.lora_int_id, lora.lora_path))


@dataclass
class PrefixCacheStats:
    """Token counts over prefix-cache lookups (one per admission attempt of a request)."""

    requests: int = 0
    queries: int = 0  # tokens looked up
    hits: int = 0  # tokens found cached

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


class KVCacheManager:
    """Allocates paged KV blocks to requests; shares full blocks of equal prefixes.

    Typical use by a scheduler admitting a request::

        hits, num_hit_tokens = kv.get_computed_blocks(req)
        if kv.allocate_slots(req, n, hits):  # all or nothing
            req.num_computed_tokens = num_hit_tokens

    and for a running request ``kv.allocate_slots(req, n)``; ``kv.free(req)`` when it finishes
    or is preempted. ``block_ids(request_id)`` gives the block table for the model runner.
    """

    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.pool = BlockPool(num_blocks)
        self._blocks: dict[str, list[KVBlock]] = {}  # request id -> blocks, table order
        self._block_ids: dict[str, list[int]] = {}  # the same as ids, kept in step
        self._num_registered: dict[str, int] = {}  # leading blocks already offered to the cache
        self.prefix_cache_stats = PrefixCacheStats()
        # called with (request, block index, block) for each block that enters the prefix cache (a KV connector
        # saves them once computed); None: nobody asks
        self.on_cached: Callable[[Request, int, KVBlock], None] | None = None

    # -- queries ---------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self.pool.num_blocks

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free_blocks

    @property
    def usage(self) -> float:
        """Fraction of blocks held by some request (cached free blocks count as free)."""
        return 1.0 - self.pool.num_free_blocks / self.pool.num_blocks

    def block_ids(self, request_id: str) -> list[int]:
        """The request's block table (a live list: read it, do not modify it)."""
        return self._block_ids.get(request_id, [])

    def blocks_of(self, request_id: str) -> list[KVBlock]:
        """The request's blocks in table order (a live list: read only)."""
        return self._blocks.get(request_id, [])

    # -- prefix cache ----------------------------------------------------------------------

    def get_computed_blocks(self, request: Request) -> tuple[list[KVBlock], int]:
        """The longest cached prefix of ``request``'s full blocks, and its token count.

        Never covers the last token (it must be computed to produce logits).
        """
        if not self.enable_prefix_caching:
            return [], 0
        self._update_block_hashes(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.pool.get_cached(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def reset_prefix_cache(self) -> None:
        """Forget all cached prefixes (e.g. after new weights are loaded)."""
        self.pool.reset_prefix_cache()

    # -- allocation ------------------------------------------------------------------------

    def allocate_slots(
        self, request: Request, num_new_tokens: int, computed_blocks: Sequence[KVBlock] | None = None,
        register: bool = True,
    ) -> bool:
        """Hold blocks for ``num_computed_tokens + len(computed_blocks) * block_size + num_new_tokens``.

        ``computed_blocks`` (hits from :meth:`get_computed_blocks`) may only be given to a request
        holding no blocks. Returns False, changing nothing, if there are not enough free blocks.
        ``register=False``: the new blocks are not offered to the prefix cache yet (a KV connector fills
        them first; :meth:`register_computed` offers them once it did).
        """
        hits = list(computed_blocks or ())
        held = self._blocks.get(request.request_id)
        if hits and held:
            raise ValueError(f"request {request.request_id} already holds blocks; cannot add cache hits")
        num_held = len(held) if held else 0
        total_tokens = request.num_computed_tokens + len(hits) * self.block_size + num_new_tokens
        num_new_blocks = max(0, -(-total_tokens // self.block_size) - num_held - len(hits))
        num_free_hits = sum(1 for b in hits if b.ref_count == 0)  # taking them shrinks the free queue
        if num_new_blocks + num_free_hits > self.pool.num_free_blocks:
            return False
        if held is None:
            held = self._blocks[request.request_id] = []
            self._block_ids[request.request_id] = []
            self._num_registered[request.request_id] = 0
        self.pool.touch(hits)  # before allocating, so allocation cannot evict a hit
        new_blocks = hits + self.pool.allocate(num_new_blocks)
        held.extend(new_blocks)
        self._block_ids[request.request_id].extend(b.block_id for b in new_blocks)
        if hits:
            self._num_registered[request.request_id] = len(hits)
        if self.enable_prefix_caching:
            if register:
                self._register_full_blocks(request, min(total_tokens, request.num_tokens))
            if computed_blocks is not None:  # an admission: count its lookup once, when it succeeds
                self._record_lookup(request, len(hits) * self.block_size)
        return True

    def register_computed(self, request: Request, num_tokens: int) -> None:
        """Offer to the prefix cache the request's full blocks within its first ``num_tokens`` (blocks a KV
        connector filled after :meth:`allocate_slots` with ``register=False``)."""
        if self.enable_prefix_caching and request.request_id in self._blocks:
            self._register_full_blocks(request, min(num_tokens, request.num_tokens))

    def _record_lookup(self, request: Request, num_hit_tokens: int) -> None:
        stats = self.prefix_cache_stats
        stats.requests += 1
        stats.queries += request.num_tokens
        stats.hits += num_hit_tokens

    def fork(self, parent: Request, child: Request) -> int:
        """Give ``child`` (holding no blocks) the parent's full blocks whose KV is computed, one more
        reference each: nothing is copied. Returns the tokens they hold; the child computes the rest
        (the parent's partial last block is recomputed into a block of the child's own)."""
        if child.request_id in self._blocks:
            raise ValueError(f"request {child.request_id} already holds blocks; cannot fork into it")
        blocks = self._blocks.get(parent.request_id, [])
        shared = blocks[: min(parent.num_computed_tokens // self.block_size, len(blocks))]
        self.pool.touch(shared)
        self._blocks[child.request_id] = list(shared)
        self._block_ids[child.request_id] = [b.block_id for b in shared]
        self._num_registered[child.request_id] = min(self._num_registered.get(parent.request_id, 0), len(shared))
        child.block_hashes = list(parent.block_hashes[: len(shared)])
        return len(shared) * self.block_size

    def trim(self, request: Request, num_tokens: int) -> None:
        """Release the blocks past the first ``num_tokens`` tokens (rejected speculative tokens);
        they were never offered to the prefix cache (drafts are not known tokens)."""
        blocks = self._blocks.get(request.request_id)
        keep = -(-num_tokens // self.block_size)
        if not blocks or len(blocks) <= keep:
            return
        extra = blocks[keep:]
        del blocks[keep:]
        del self._block_ids[request.request_id][keep:]
        self._num_registered[request.request_id] = min(self._num_registered[request.request_id], keep)
        self.pool.release(extra)

    def free(self, request: Request) -> None:
        """Drop the request's blocks (they stay cached until evicted). No-op if it holds none."""
        blocks = self._blocks.pop(request.request_id, None)
        self._block_ids.pop(request.request_id, None)
        self._num_registered.pop(request.request_id, None)
        if blocks:
            self.pool.release(blocks)

    # -- internals -------------------------------------------------------------------------

    def _update_block_hashes(self, request: Request, num_tokens: int | None = None) -> None:
        """Extend ``request.block_hashes`` to cover the full blocks of its first ``num_tokens``
        (never past its known tokens: a placeholder's block is hashed once the token is read)."""
        hashes = request.block_hashes
        bs = self.block_size
        known = request.num_known_tokens
        num_full = (known if num_tokens is None else min(num_tokens, known)) // bs
        tokens = request.token_ids
        for i in range(len(hashes), num_full):
            content = request.content_keys(i * bs, (i + 1) * bs) if request.mm_items else ()
            hashes.append(hash_block(hashes[-1] if hashes else first_parent(request), tokens[i * bs : (i + 1) * bs],
                                     content))

    def _register_full_blocks(self, request: Request, num_tokens: int) -> None:
        """Offer to the prefix cache the blocks that are full once ``num_tokens`` are computed
        (and whose tokens are all known)."""
        num_full = min(num_tokens, request.num_known_tokens) // self.block_size
        start = self._num_registered[request.request_id]
        if num_full <= start:
            return
        self._update_block_hashes(request, num_tokens)
        blocks = self._blocks[request.request_id]
        on_cached = self.on_cached
        for i in range(start, num_full):
            if self.pool.cache(blocks[i], request.block_hashes[i]) and on_cached is not None:  # no-op if cached
                on_cached(request, i, blocks[i])
        self._num_registered[request.request_id] = num_full
