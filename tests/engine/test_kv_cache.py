"""KV block pool and KVCacheManager: LRU freeing, chained hashes, prefix hits, all-or-nothing allocation."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from pagoda.kv_cache.block_pool import BlockPool
from pagoda.kv_cache.manager import KVCacheManager, hash_block
from pagoda.request import Request

BS = 4


def make_request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, list(tokens), SimpleNamespace(max_tokens=8))


def check_invariants(kv: KVCacheManager, request_ids: list[str]) -> None:
    """Ref counts equal holdings; no block twice in one table; free + used == total."""
    holdings: Counter[int] = Counter()
    for rid in request_ids:
        ids = kv.block_ids(rid)
        assert len(ids) == len(set(ids)), f"{rid} holds a block twice"
        assert ids == [b.block_id for b in kv.blocks_of(rid)]
        holdings.update(ids)
    for block in kv.pool.blocks:
        assert block.ref_count == holdings[block.block_id]
    used = sum(1 for b in kv.pool.blocks if b.ref_count > 0)
    assert used + kv.num_free_blocks == kv.num_blocks
    assert all(kv.pool.blocks[i].ref_count == 0 for i in kv.pool.free_block_ids())


def admit(kv: KVCacheManager, req: Request, num_new: int | None = None) -> int:
    """Take hits and allocate the rest of the prompt (or ``num_new``); returns the hit tokens."""
    hits, n_hit = kv.get_computed_blocks(req)
    n = req.num_tokens - n_hit if num_new is None else num_new
    assert kv.allocate_slots(req, n, hits)
    req.num_computed_tokens = n_hit
    return n_hit


def test_pool_lru_order_reverse_release_and_touch_from_middle():
    pool = BlockPool(6)
    taken = pool.allocate(3)
    assert [b.block_id for b in taken] == [0, 1, 2]
    assert pool.free_block_ids() == [3, 4, 5]
    pool.release(taken)  # table order in, reverse order onto the free tail
    assert pool.free_block_ids() == [3, 4, 5, 2, 1, 0]
    pool.touch([pool.blocks[5]])  # a hit on a free block removes it from the middle
    assert pool.free_block_ids() == [3, 4, 2, 1, 0]
    assert pool.blocks[5].ref_count == 1
    pool.touch([pool.blocks[5]])
    pool.release([pool.blocks[5]])
    assert pool.blocks[5].ref_count == 1 and 5 not in pool.free_block_ids()
    with pytest.raises(RuntimeError):
        pool.allocate(6)


def test_chained_hashes_depend_on_whole_prefix_and_grow_incrementally():
    kv = KVCacheManager(16, BS)
    a = make_request("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    b = make_request("b", [1, 2, 3, 4, 5, 6, 7, 0, 9])
    c = make_request("c", [0, 2, 3, 4, 5, 6, 7, 8, 9])
    for r in (a, b, c):
        kv.get_computed_blocks(r)
    assert len(a.block_hashes) == 2  # only full blocks
    assert a.block_hashes[0] == b.block_hashes[0] == hash_block(None, [1, 2, 3, 4])
    assert a.block_hashes[1] != b.block_hashes[1]
    assert a.block_hashes[1] == hash_block(a.block_hashes[0], [5, 6, 7, 8])
    assert c.block_hashes[0] != a.block_hashes[0]
    assert c.block_hashes[1] != a.block_hashes[1]  # same tokens, different earlier block
    first = list(a.block_hashes)
    for t in (10, 11, 12):
        a.append_token(t)
    kv.get_computed_blocks(a)
    assert a.block_hashes[:2] == first and len(a.block_hashes) == 3


def test_hit_never_covers_the_last_token():
    kv = KVCacheManager(16, BS)
    a = make_request("a", range(8))
    admit(kv, a)
    same = make_request("same", range(8))
    hits, n_hit = kv.get_computed_blocks(same)
    assert n_hit == 4 and [b.block_id for b in hits] == kv.block_ids("a")[:1]
    longer = make_request("longer", list(range(8)) + [99])
    hits, n_hit = kv.get_computed_blocks(longer)
    assert n_hit == 8 and [b.block_id for b in hits] == kv.block_ids("a")


def test_hits_survive_finished_requests_and_count_statistics():
    kv = KVCacheManager(8, BS)
    a = make_request("a", range(10))
    assert admit(kv, a) == 0
    a_blocks = list(kv.block_ids("a"))
    kv.free(a)
    assert kv.num_free_blocks == 8 and kv.usage == 0.0
    b = make_request("b", list(range(8)) + [50, 51, 52])
    assert admit(kv, b) == 8
    assert kv.block_ids("b")[:2] == a_blocks[:2]
    assert b.num_computed_tokens == 8
    check_invariants(kv, ["b"])
    stats = kv.prefix_cache_stats
    assert (stats.requests, stats.queries, stats.hits) == (2, 21, 8)
    assert stats.hit_rate == pytest.approx(8 / 21)


def test_shared_blocks_take_references_while_both_run():
    kv = KVCacheManager(8, BS)
    a, b = make_request("a", range(9)), make_request("b", range(9))
    admit(kv, a)
    assert admit(kv, b) == 8  # registered at allocation: a concurrent prompt hits at once
    shared = kv.block_ids("a")[:2]
    assert kv.block_ids("b")[:2] == shared
    assert [kv.pool.blocks[i].ref_count for i in shared] == [2, 2]
    assert kv.num_free_blocks == 8 - 4
    check_invariants(kv, ["a", "b"])
    kv.free(a)
    assert [kv.pool.blocks[i].ref_count for i in shared] == [1, 1]
    check_invariants(kv, ["b"])


def test_duplicate_content_stays_uncached():
    kv = KVCacheManager(8, BS)
    a, b = make_request("a", range(8)), make_request("b", range(8))
    admit(kv, a)
    admit(kv, b)  # hits block 0 only; recomputes block 1, whose hash a's block already holds
    a_ids, b_ids = kv.block_ids("a"), kv.block_ids("b")
    assert b_ids[0] == a_ids[0] and b_ids[1] != a_ids[1]
    assert kv.pool.blocks[b_ids[1]].block_hash is None
    assert kv.pool.num_cached_blocks == 2
    assert kv.pool.get_cached(a.block_hashes[1]).block_id == a_ids[1]


def test_eviction_removes_the_hash():
    kv = KVCacheManager(3, BS)
    a = make_request("a", range(9))
    admit(kv, a)
    kv.free(a)  # free queue: a's block 2 (partial), then block 1, then block 0
    assert kv.pool.num_cached_blocks == 2
    other = make_request("other", [100, 101, 102, 103, 104])
    assert admit(kv, other) == 0  # takes two blocks from the head: the partial one, then a's block 1
    assert kv.pool.get_cached(a.block_hashes[1]) is None  # evicted with its block
    assert kv.pool.get_cached(a.block_hashes[0]) is not None  # still at the free queue's tail
    assert kv.pool.num_cached_blocks == 2  # a's first block and other's full block
    again = make_request("again", range(9))
    hits, n_hit = kv.get_computed_blocks(again)
    assert n_hit == 4 and hits[0].block_id == kv.pool.get_cached(a.block_hashes[0]).block_id


def test_allocate_slots_is_all_or_nothing_counting_free_hits():
    kv = KVCacheManager(4, BS)
    a = make_request("a", range(9))
    admit(kv, a)
    kv.free(a)  # free: [3, 2, 1, 0]; blocks 0 and 1 cached
    d = make_request("d", [77] * 8)
    admit(kv, d)  # takes 3 and 2; free: [1, 0], both cache hits for the next prompt
    b = make_request("b", list(range(8)) + [5])
    hits, n_hit = kv.get_computed_blocks(b)
    assert n_hit == 8 and kv.num_free_blocks == 2
    assert not kv.allocate_slots(b, 1, hits)  # 1 new + 2 hits leaving the free queue > 2 free
    assert kv.block_ids("b") == [] and kv.num_free_blocks == 2
    assert [blk.ref_count for blk in hits] == [0, 0]
    d.num_computed_tokens = 8
    assert not kv.allocate_slots(d, 9)  # 17 tokens need 5 blocks, d holds 2: 3 > 2 free
    assert kv.block_ids("d") == [3, 2]
    check_invariants(kv, ["d"])
    kv.free(d)  # free: [1, 0, 2, 3]
    assert kv.allocate_slots(b, 1, hits)
    assert kv.block_ids("b") == [0, 1, 2]  # the hits are taken before allocation can evict them
    check_invariants(kv, ["b"])


def test_decode_growth_allocates_per_block_and_registers_filled_blocks():
    kv = KVCacheManager(4, BS)
    r = make_request("r", range(3))
    admit(kv, r)
    r.num_computed_tokens = 3
    assert kv.block_ids("r") == [0] and kv.pool.num_cached_blocks == 0
    r.append_token(3)
    assert kv.allocate_slots(r, 1)  # the 4th token fills block 0
    r.num_computed_tokens = 4
    assert kv.pool.num_cached_blocks == 1 and len(r.block_hashes) == 1
    r.append_token(4)
    assert kv.allocate_slots(r, 1)
    assert kv.block_ids("r") == [0, 1]
    assert kv.usage == 0.5


def test_prefix_caching_disabled_and_reset():
    off = KVCacheManager(4, BS, enable_prefix_caching=False)
    a = make_request("a", range(9))
    admit(off, a)
    assert off.pool.num_cached_blocks == 0
    assert off.get_computed_blocks(make_request("b", range(9))) == ([], 0)

    on = KVCacheManager(4, BS)
    admit(on, make_request("a", range(9)))
    on.reset_prefix_cache()
    assert on.pool.num_cached_blocks == 0
    assert on.get_computed_blocks(make_request("b", range(9)))[1] == 0
    assert all(b.block_hash is None for b in on.pool.blocks)
