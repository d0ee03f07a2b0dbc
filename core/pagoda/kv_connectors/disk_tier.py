"""The offload connector's disk tier: one file per block under ``<dir>/<namespace>/`` (:mod:`block_file`).

Files are written on a writer thread of their own, behind the host tier (a block reaches the disk once it
is in host memory); a write queue longer than ``MAX_QUEUED`` drops new blocks (they just are not on disk).
The index of the blocks on disk is read from the folder at start, so the tier survives a restart; left-over
temporary files of a crash are removed then. With a byte limit, the least recently used files go first.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from pagoda.interfaces.kv_connector import KVCacheLayout
from pagoda.kv_connectors import block_file

logger = logging.getLogger("pagoda")
MAX_QUEUED = 4096  # blocks waiting for the writer thread


class DiskTier:
    """Blocks of one namespace in ``root`` (at most ``max_bytes`` of files: None for no limit)."""

    def __init__(self, root: Path, layout: KVCacheLayout, max_bytes: int | None = None) -> None:
        self.folder = Path(root) / layout.namespace
        self.folder.mkdir(parents=True, exist_ok=True)
        self.namespace = layout.namespace
        self.file_bytes = block_file.HEADER.size + layout.block_bytes + block_file.TRAILER.size
        self.max_files = None if max_bytes is None else max(1, max_bytes // self.file_bytes)
        self._index: OrderedDict[bytes, None] = OrderedDict()  # keys on disk, least recently used first
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="pagoda-kv-disk")
        self._queued = 0
        self.dropped = 0  # blocks not written: the queue was full
        self.failed = 0  # writes that raised
        self._scan()

    def __contains__(self, key: bytes) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._index)

    def read(self, key: bytes, out: torch.Tensor) -> bool:
        """Fill ``out`` with block ``key``; False (and the file removed) if it is missing, torn or foreign."""
        path = block_file.path_of(self.folder, key)
        problem = block_file.read_block(path, key, self.namespace, out)
        with self._lock:
            if problem is None:
                self._index[key] = None
                self._index.move_to_end(key)
                return True
            self._index.pop(key, None)
        logger.warning("KV offload disk tier: ignoring %s: %s", path, problem)
        path.unlink(missing_ok=True)
        return False

    def write_later(self, key: bytes, block: torch.Tensor, done: Callable[[], None]) -> bool:
        """Queue ``block`` (unchanged until ``done`` is called, on the writer thread) to be written; False when
        the queue is full or the block is on disk already (``done`` is then not called)."""
        with self._lock:
            if key in self._index or self._queued >= MAX_QUEUED:
                self.dropped += key not in self._index
                return False
            self._queued += 1
        self._writer.submit(self._write, key, block, done)
        return True

    def close(self) -> None:
        """Finish the queued writes."""
        self._writer.shutdown(wait=True)

    def _write(self, key: bytes, block: torch.Tensor, done: Callable[[], None]) -> None:
        try:
            block_file.write_block(block_file.path_of(self.folder, key), key, self.namespace, block)
        except Exception as exc:  # noqa: BLE001 - a full or failing disk: the block is just not on disk
            self.failed += 1
            logger.warning("KV offload disk tier: could not write a block to %s: %s", self.folder, exc)
            return
        finally:
            done()
            with self._lock:
                self._queued -= 1
        with self._lock:
            self._index[key] = None
            evicted = self._evict()
        for old in evicted:
            block_file.path_of(self.folder, old).unlink(missing_ok=True)

    def _evict(self) -> list[bytes]:
        """Keys beyond the file limit, least recently used first (removed from the index)."""
        evicted = []
        while self.max_files is not None and len(self._index) > self.max_files:
            evicted.append(self._index.popitem(last=False)[0])
        return evicted

    def _scan(self) -> None:
        """Index the block files already here (oldest first); remove temporary files a crash left."""
        found = []
        for path in self.folder.glob("*/*"):
            if path.name.endswith(block_file.TEMP_SUFFIX):
                path.unlink(missing_ok=True)
                continue
            key = block_file.key_of(path)
            if key is not None:
                found.append((path.stat().st_mtime, key))
        for _, key in sorted(found):
            self._index[key] = None
        if found:
            logger.info("KV offload disk tier: %d blocks in %s", len(found), self.folder)
