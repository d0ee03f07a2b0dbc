"""KV blocks in host memory by block key: a bounded pool of slots, least recently used evicted first.

Slots come from ``KVConnectorContext.host_blocks`` (pinned on GPUs: the engine copies them to and from the
device at full speed) in segments, allocated as the store fills, so a large tier costs nothing until used.
A slot being read by the engine (``get`` .. ``unpin``) or written to disk is pinned: never evicted, never
overwritten. Thread-safe: lookups run on the engine's thread, the rest on the transfer thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import torch

SEGMENT_BYTES = 1 << 30  # host memory is allocated (and pinned) a segment at a time


class HostBlockStore:
    """Up to ``capacity`` blocks of ``block_bytes`` each, by key."""

    def __init__(self, capacity: int, block_bytes: int, allocate: Callable[[int], torch.Tensor]) -> None:
        if capacity < 1:
            raise ValueError(f"a host block store needs room for at least one block ({block_bytes} bytes)")
        self.capacity = capacity
        self.per_segment = max(1, min(capacity, SEGMENT_BYTES // block_bytes))
        self._allocate = allocate
        self._segments: list[torch.Tensor] = []  # each [per_segment, *block_shape]
        self._index: OrderedDict[bytes, int] = OrderedDict()  # key -> slot, least recently used first
        self._pins: dict[int, int] = {}  # slot -> pins
        self._free: list[int] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: bytes) -> bool:
        return key in self._index

    def count_prefix(self, keys: Sequence[bytes]) -> int:
        """How many of ``keys``, from the first, are held (those are marked recently used)."""
        with self._lock:
            n = 0
            for key in keys:
                if key not in self._index:
                    break
                self._index.move_to_end(key)
                n += 1
            return n

    def get(self, key: bytes) -> torch.Tensor | None:
        """The block's slot, pinned until :meth:`unpin` (None if not held)."""
        with self._lock:
            slot = self._index.get(key)
            if slot is None:
                return None
            self._index.move_to_end(key)
            self._pins[slot] = self._pins.get(slot, 0) + 1
            return self._view(slot)

    def unpin(self, key: bytes) -> None:
        with self._lock:
            slot = self._index.get(key)
            if slot is not None and self._pins.get(slot):
                self._pins[slot] -= 1
                if not self._pins[slot]:
                    del self._pins[slot]

    def put(self, key: bytes, block: torch.Tensor, pin: bool = False) -> torch.Tensor | None:
        """Copy ``block`` in (unless held already) and return its slot (pinned with ``pin``); None when every
        slot is pinned."""
        with self._lock:
            slot = self._index.get(key)
            if slot is None:
                slot = self._take_slot()
                if slot is None:
                    return None
                self._pins[slot] = 1  # while it is filled, outside the lock
                fill = True
            else:
                self._index.move_to_end(key)
                self._pins[slot] = self._pins.get(slot, 0) + 1
                fill = False
        view = self._view(slot)
        if fill:
            view.copy_(block)
        with self._lock:
            if fill:
                self._index[key] = slot
            if not pin:
                self._pins[slot] -= 1
                if not self._pins[slot]:
                    del self._pins[slot]
        return view

    def _take_slot(self) -> int | None:
        """A free slot: unused, a new segment's, or the least recently used unpinned one's (evicted)."""
        if self._free:
            return self._free.pop()
        used = len(self._segments) * self.per_segment
        if used < self.capacity:
            count = min(self.per_segment, self.capacity - used)
            self._segments.append(self._allocate(count))
            self._free.extend(range(used + count - 1, used, -1))
            return used
        for key, slot in self._index.items():  # oldest first
            if slot not in self._pins:
                del self._index[key]
                return slot
        return None

    def _view(self, slot: int) -> torch.Tensor:
        return self._segments[slot // self.per_segment][slot % self.per_segment]


class BlockBuffers:
    """Host buffers of one block each, reused: ``take`` one, ``give`` it back (thread-safe)."""

    def __init__(self, allocate: Callable[[int], torch.Tensor], grow: int = 16) -> None:
        self._allocate = allocate
        self._grow = grow
        self._free: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self) -> torch.Tensor:
        with self._lock:
            if not self._free:
                self._free.extend(self._allocate(self._grow).unbind(0))
            return self._free.pop()

    def give(self, buffer: torch.Tensor) -> None:
        with self._lock:
            self._free.append(buffer)
