"""The built-in ``shared_storage`` connector: blocks as files in a folder every engine of a deployment sees.

``--kv-transfer-config '{"kv_connector": "shared_storage", "kv_role": "kv_producer", "kv_connector_extra_config":
{"path": "/mnt/kv"}}'`` on a prefill engine, ``"kv_role": "kv_consumer"`` with the same path on a decode engine
(``kv_both`` does both: a cache shared by several engines). Each rank writes its own heads' part of a block
to ``<path>/<namespace>/<key>.kv`` (:mod:`pagoda.kv_connectors.block_file`: written whole or not at all,
verified on read); engines of the same model, dtype, layout and tensor-parallel size share the namespace.
A producer's step returns its tokens only once its blocks are written, so a decode engine asked right
after sees them. Nothing is ever deleted: clear the folder when it grows too large.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from pagoda.errors import ConfigError
from pagoda.interfaces.kv_connector import KVConnector, KVConnectorContext
from pagoda.kv_connectors import block_file
from pagoda.kv_connectors.host_store import BlockBuffers


class SharedStorageConnector(KVConnector):
    """Blocks in files under a shared folder (module docstring)."""

    description = "KV blocks as files in a shared folder (disaggregated prefill, a cache shared by engines)"

    def __init__(self, context: KVConnectorContext) -> None:
        super().__init__(context)
        path = context.config.option("path")
        if not isinstance(path, str) or not path:
            raise ConfigError('the shared_storage connector needs a folder: --kv-transfer-config \'{"kv_connector": '
                              '"shared_storage", "kv_connector_extra_config": {"path": "/mnt/kv"}}\'')
        self.folder = Path(path) / context.layout.namespace
        self.folder.mkdir(parents=True, exist_ok=True)
        self._buffers = BlockBuffers(context.host_blocks)
        self._reading: dict[bytes, list[torch.Tensor]] = {}  # key -> buffers handed out by read
        self._lock = threading.Lock()

    def lookup(self, keys: Sequence[bytes]) -> int:
        n = 0
        for key in keys:
            if not block_file.path_of(self.folder, key).is_file():
                break
            n += 1
        return n

    def read(self, key: bytes) -> torch.Tensor | None:
        buffer = self._buffers.take()
        problem = block_file.read_block(block_file.path_of(self.folder, key), key, self.layout.namespace, buffer)
        if problem is not None:
            self._buffers.give(buffer)
            return None
        with self._lock:
            self._reading.setdefault(key, []).append(buffer)
        return buffer

    def release(self, key: bytes) -> None:
        with self._lock:
            buffers = self._reading.get(key)
            buffer = buffers.pop(0) if buffers else None  # loads of one key end in the order they were read
            if buffers is not None and not buffers:
                del self._reading[key]
        if buffer is not None:
            self._buffers.give(buffer)

    def write(self, key: bytes, block: torch.Tensor) -> None:
        path = block_file.path_of(self.folder, key)
        if not path.is_file():
            block_file.write_block(path, key, self.layout.namespace, block)
