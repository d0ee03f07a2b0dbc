"""Block files (written whole or not at all, verified on read) and the host block store (LRU, pinned slots)."""

from __future__ import annotations

import os

import pytest
import torch

from pagoda.kv_connectors import block_file
from pagoda.kv_connectors.disk_tier import DiskTier
from pagoda.kv_connectors.host_store import HostBlockStore
from pagoda.interfaces.kv_connector import KVCacheLayout

KEY = bytes(range(16))
NAMESPACE = "ab" * 16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn])
def test_a_block_file_reads_back_bit_for_bit(tmp_path, dtype):
    block = torch.randn(2, 2, 8, 4).to(dtype)
    path = block_file.path_of(tmp_path, KEY)
    block_file.write_block(path, KEY, NAMESPACE, block)
    out = torch.empty_like(block)
    assert block_file.read_block(path, KEY, NAMESPACE, out) is None
    assert torch.equal(out.view(torch.uint8), block.view(torch.uint8))
    assert [p.name for p in path.parent.iterdir()] == [path.name], "no temporary file is left"


def damaged(tmp_path, damage) -> str | None:
    block = torch.randn(2, 8, 4)
    path = block_file.path_of(tmp_path, KEY)
    block_file.write_block(path, KEY, NAMESPACE, block)
    data = bytearray(path.read_bytes())
    path.write_bytes(bytes(damage(data)))
    return block_file.read_block(path, KEY, NAMESPACE, torch.empty_like(block))


def test_damaged_files_never_serve_a_block(tmp_path):
    head = block_file.HEADER.size

    def flip(i):
        def damage(data):
            data[i] ^= 0xFF
            return data
        return damage

    assert "torn" in damaged(tmp_path, lambda d: d[: len(d) // 2])
    assert "CRC" in damaged(tmp_path, flip(head + 5))  # the payload
    assert "CRC" in damaged(tmp_path, flip(20))  # the header
    assert "trailer" in damaged(tmp_path, flip(-3))
    block = torch.randn(2, 8, 4)
    path = block_file.path_of(tmp_path, KEY)
    block_file.write_block(path, KEY, NAMESPACE, block)
    assert "namespace" in block_file.read_block(path, KEY, "cd" * 16, torch.empty_like(block))
    assert "key" in block_file.read_block(path, bytes(16), NAMESPACE, torch.empty_like(block))
    assert "bytes" in block_file.read_block(path, KEY, NAMESPACE, torch.empty(2, 8, 8))


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def no_disk(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", no_disk)
    path = block_file.path_of(tmp_path, KEY)
    with pytest.raises(OSError):
        block_file.write_block(path, KEY, NAMESPACE, torch.zeros(4))
    assert list(path.parent.iterdir()) == []


def test_the_disk_tier_indexes_its_files_and_drops_temporary_ones(tmp_path):
    layout = KVCacheLayout(1, (2, 4), torch.float32, 4, 0, 1, NAMESPACE)
    tier = DiskTier(tmp_path, layout)
    block = torch.randn(1, 2, 4)
    assert tier.write_later(KEY, block, lambda: None)
    tier.close()
    leftover = block_file.path_of(tier.folder, KEY).with_name(".x.123.tmp")
    leftover.write_bytes(b"half a block")
    again = DiskTier(tmp_path, layout)
    assert KEY in again and len(again) == 1 and not leftover.exists()
    out = torch.empty_like(block)
    assert again.read(KEY, out) and torch.equal(out, block)


def store(capacity: int) -> HostBlockStore:
    return HostBlockStore(capacity, 16, lambda n: torch.empty(n, 4))


def test_the_host_store_evicts_the_least_recently_used_unpinned_block():
    s = store(3)
    keys = [bytes([i]) * 16 for i in range(5)]
    for i in range(3):
        s.put(keys[i], torch.full((4,), float(i)))
    assert s.count_prefix(keys[:2]) == 2  # keys 0 and 1 used: key 2 is now the oldest
    pinned = s.get(keys[2])
    s.put(keys[3], torch.full((4,), 3.0))  # evicts key 0 (key 2 is pinned)
    assert keys[0] not in s and keys[2] in s and torch.equal(pinned, torch.full((4,), 2.0))
    s.unpin(keys[2])
    s.put(keys[4], torch.full((4,), 4.0))  # evicts key 1
    assert [k in s for k in keys] == [False, False, True, True, True]
    assert s.count_prefix([keys[2], keys[0], keys[3]]) == 1


def test_the_host_store_refuses_when_every_slot_is_pinned():
    s = store(1)
    s.put(b"a" * 16, torch.zeros(4), pin=True)
    assert s.put(b"b" * 16, torch.ones(4)) is None
