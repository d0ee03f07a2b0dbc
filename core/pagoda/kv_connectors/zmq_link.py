"""The built-in ``zmq`` connector: a prefill engine sends its blocks straight to a decode engine's host memory.

``--kv-transfer-config '{"kv_connector": "zmq", "kv_role": "kv_consumer", "kv_connector_extra_config":
{"address": "tcp://0.0.0.0:5600", "buffer_gib": 4}}'`` on the decode engine (rank ``r`` binds port ``5600 + r``),
``"kv_role": "kv_producer"`` with the decode engine's ``"address": "tcp://decode-host:5600"`` on the prefill
engine (rank ``r`` connects to port ``5600 + r``: both engines run the same tensor-parallel size). Each block
goes as one message (namespace, key, this rank's bytes) and is acknowledged once it is in the consumer's
host store (least recently used blocks make room); the producer's step returns its tokens only once every
block of it was acknowledged (``timeout_s``, default 30). A block of another namespace or size is refused.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Sequence

import msgspec
import torch
import zmq

from pagoda.errors import ConfigError
from pagoda.interfaces.kv_connector import KVConnector, KVConnectorContext
from pagoda.kv_connectors.host_store import HostBlockStore

GiB = 1 << 30
OK = b"ok"


class ZmqConnector(KVConnector):
    """Producer: sends each computed block to the consumer. Consumer: keeps the blocks it receives (module docstring)."""

    description = "KV blocks pushed from a prefill engine to a decode engine's host memory over ZeroMQ"
    roles = ("kv_producer", "kv_consumer")

    def __init__(self, context: KVConnectorContext) -> None:
        super().__init__(context)
        self.address = _address(context.config.option("address"), context.layout.rank)
        self.timeout_s = float(context.config.option("timeout_s", 30.0))
        self._zmq = zmq.Context()
        self._socket: zmq.Socket | None = None  # the producer's, made on the transfer thread that uses it
        self._unacknowledged = 0
        self.store: HostBlockStore | None = None
        if context.config.kv_role == "kv_consumer":
            buffer_gib = float(context.config.option("buffer_gib", 1.0))
            slots = int(buffer_gib * GiB) // context.layout.block_bytes
            self.store = HostBlockStore(max(1, slots), context.layout.block_bytes, context.host_blocks)
            self._receiver = _Receiver(self._zmq, self.address, context.layout, self.store)

    def lookup(self, keys: Sequence[bytes]) -> int:
        return 0 if self.store is None else self.store.count_prefix(keys)

    def read(self, key: bytes) -> torch.Tensor | None:
        return None if self.store is None else self.store.get(key)

    def release(self, key: bytes) -> None:
        if self.store is not None:
            self.store.unpin(key)

    def write(self, key: bytes, block: torch.Tensor) -> None:
        if self._socket is None:
            self._socket = self._zmq.socket(zmq.DEALER)
            self._socket.setsockopt(zmq.LINGER, 0)
            self._socket.connect(self.address)
        header = msgspec.msgpack.encode([self.layout.namespace, key, self.layout.block_bytes])
        self._socket.send_multipart([header, block.reshape(-1).view(torch.uint8).numpy()])
        self._unacknowledged += 1

    def flush(self) -> None:
        """Wait for the consumer's acknowledgement of every block sent."""
        refused, deadline = [], time.monotonic() + self.timeout_s
        while self._unacknowledged:
            left = deadline - time.monotonic()
            if left <= 0 or not self._socket.poll(int(left * 1000)):
                lost, self._unacknowledged = self._unacknowledged, 0
                raise TimeoutError(f"{lost} KV blocks sent to {self.address} were not acknowledged within "
                                   f"{self.timeout_s:.0f} s (is the consumer engine running?)")
            _, status = self._socket.recv_multipart()
            self._unacknowledged -= 1
            if status != OK:
                refused.append(status.decode(errors="replace"))
        if refused:
            raise RuntimeError(f"the consumer at {self.address} refused {len(refused)} blocks: {refused[0]}")

    def close(self) -> None:
        if self.store is not None:
            self._receiver.stop()
        if self._socket is not None:
            self._socket.close(0)


class _Receiver:
    """The consumer's thread: receives blocks, keeps them in the store, acknowledges them."""

    def __init__(self, context: zmq.Context, address: str, layout, store: HostBlockStore) -> None:
        self.layout, self.store = layout, store
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.bind(address)
        self._stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pagoda-kv-zmq", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self.thread.join(5)

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self.socket.poll(100):
                continue
            identity, header, payload = self.socket.recv_multipart(copy=False)
            namespace, key, size = msgspec.msgpack.decode(header.bytes)
            status = self._keep(namespace, key, size, payload.buffer)
            self.socket.send_multipart([identity.bytes, key, status])
        self.socket.close(0)

    def _keep(self, namespace: str, key: bytes, size: int, payload: memoryview) -> bytes:
        layout = self.layout
        if namespace != layout.namespace or size != layout.block_bytes or len(payload) != size:
            return (f"a block of namespace {namespace} and {len(payload)} bytes; this engine keeps namespace "
                    f"{layout.namespace}, {layout.block_bytes} bytes (another model, dtype, layout or "
                    "tensor-parallel size)").encode()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a read-only message buffer: only copied from
            block = torch.frombuffer(payload, dtype=torch.uint8).view(layout.dtype).view(layout.block_shape)
        if self.store.put(key, block) is None:
            return b"every slot of the consumer's buffer is being read; raise buffer_gib"
        return OK


def _address(value, rank: int) -> str:
    """``tcp://host:port`` with this rank's port (``port + rank``)."""
    if not isinstance(value, str) or not value.startswith("tcp://") or ":" not in value[6:]:
        raise ConfigError('the zmq connector needs "address": "tcp://HOST:PORT" in kv_connector_extra_config (the '
                          "decode engine binds it, the prefill engine connects to it); got " + repr(value))
    host, port = value[6:].rsplit(":", 1)
    try:
        return f"tcp://{host}:{int(port) + rank}"
    except ValueError:
        raise ConfigError(f"the zmq connector's address has no port number: {value!r}") from None
