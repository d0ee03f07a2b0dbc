"""The built-in ``offload`` connector: a host-memory tier under the device's prefix cache, and a disk tier under it.

``--kv-offload-gib N`` (options ``cpu_gib``, ``disk_dir``, ``disk_gib`` through ``--kv-transfer-config``):
every block that enters the device's prefix cache is copied, after the step that computes it, to host memory
(least recently used blocks make room); with ``--kv-offload-dir`` each also goes to a file. When the device
has evicted a prefix, a prompt that starts with it loads its blocks from host memory (or disk) instead of
computing them. Blocks are keyed by block key; the disk tier's files by the namespace too
(:mod:`pagoda.kv_connectors.layout`), so another model, cache dtype or layout never reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from pagoda.errors import ConfigError
from pagoda.interfaces.kv_connector import KVConnector, KVConnectorContext
from pagoda.kv_connectors.disk_tier import DiskTier
from pagoda.kv_connectors.host_store import BlockBuffers, HostBlockStore

GiB = 1 << 30


class OffloadConnector(KVConnector):
    """Host-memory LRU of blocks by key, over an optional disk tier (module docstring)."""

    description = "evicted prefix blocks in host memory (--kv-offload-gib), and on disk (--kv-offload-dir)"
    roles = ("kv_both",)

    def __init__(self, context: KVConnectorContext) -> None:
        super().__init__(context)
        config, layout = context.config, context.layout
        cpu_gib = _gib(config.option("cpu_gib"), "cpu_gib")
        slots = int(cpu_gib * GiB) // layout.block_bytes
        if slots < 1:
            raise ConfigError(f"--kv-offload-gib {cpu_gib} holds no KV block of {layout.block_bytes} bytes; raise it")
        self.host = HostBlockStore(slots, layout.block_bytes, context.host_blocks)
        disk_dir, disk_gib = config.option("disk_dir"), config.option("disk_gib")
        max_bytes = None if disk_gib is None else int(_gib(disk_gib, "disk_gib") * GiB)
        self.disk = DiskTier(Path(disk_dir), layout, max_bytes) if disk_dir else None
        self._spare = BlockBuffers(context.host_blocks, grow=1)  # a disk read, before it enters the host tier

    def lookup(self, keys: Sequence[bytes]) -> int:
        n = self.host.count_prefix(keys)
        if self.disk is not None:
            while n < len(keys) and keys[n] in self.disk:
                n += 1
        return n

    def wants(self, key: bytes) -> bool:
        return key not in self.host

    def read(self, key: bytes) -> torch.Tensor | None:
        block = self.host.get(key)
        if block is not None or self.disk is None or key not in self.disk:
            return block
        spare = self._spare.take()
        try:  # into the host tier (None: every host slot is pinned; the block is recomputed)
            return self.host.put(key, spare, pin=True) if self.disk.read(key, spare) else None
        finally:
            self._spare.give(spare)

    def release(self, key: bytes) -> None:
        self.host.unpin(key)

    def write(self, key: bytes, block: torch.Tensor) -> None:
        if self.disk is None or key in self.disk:
            self.host.put(key, block)
            return
        slot = self.host.put(key, block, pin=True)  # pinned until its file is written
        if slot is None:
            return
        if not self.disk.write_later(key, slot, lambda: self.host.unpin(key)):
            self.host.unpin(key)

    def close(self) -> None:
        if self.disk is not None:
            self.disk.close()


def _gib(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"the offload connector's {name} must be a number of GiB > 0, got {value!r} "
                          "(--kv-offload-gib N, or kv_connector_extra_config)")
    return float(value)
