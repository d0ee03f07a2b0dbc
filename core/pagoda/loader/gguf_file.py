"""A GGUF file's header, metadata and tensor directory, parsed without copying the tensor data.

GGUF (llama.cpp's checkpoint format, version 2 and 3), little-endian throughout:

- ``b"GGUF"``, ``u32`` version, ``u64`` tensor count, ``u64`` metadata count;
- metadata: key (``u64`` length + UTF-8 bytes), ``u32`` value type, the value; type 8 is a string
  (``u64`` length + bytes), type 9 an array (``u32`` element type, ``u64`` count, the elements);
- tensor directory: name, ``u32`` dimension count, ``u64`` dims (fastest-varying first), ``u32``
  ggml type, ``u64`` offset into the data section;
- the data section, starting at the next multiple of ``general.alignment`` (default 32).

Numeric arrays become numpy arrays in one read, so a 262k-token vocabulary parses in a fraction of a
second. Tensor bytes stay in a read-only memory map until :meth:`GGUFFile.raw` hands out a view.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pagoda.errors import ModelLoadError
from pagoda.loader.gguf_quants import tensor_nbytes

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8", 12: "<f8"}
STRING, ARRAY = 8, 9


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the directory: ``shape`` in torch order (slowest axis first)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # absolute, in bytes from the start of the file
    nbytes: int


class _Cursor:
    """Sequential little-endian reads over a memory map."""

    def __init__(self, buf: np.memmap) -> None:
        self.buf = buf
        self.pos = 0

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.scalar("<Q")
        text = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return text

    def value(self, kind: int) -> Any:
        if kind in SCALARS:
            return self.scalar(SCALARS[kind])
        if kind == STRING:
            return self.string()
        if kind == ARRAY:
            return self.array()
        raise ValueError(f"unknown GGUF value type {kind}")

    def array(self) -> Any:
        kind, count = self.scalar("<I"), self.scalar("<Q")
        if kind in NUMPY:
            dtype = np.dtype(NUMPY[kind])
            values = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += count * dtype.itemsize
            return values
        return [self.value(kind) for _ in range(count)]


class GGUFFile:
    """``metadata`` (key -> value) and ``tensors`` (name -> :class:`TensorInfo`) of one GGUF file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.buf = np.memmap(self.path, dtype=np.uint8, mode="r")
            self._parse()
        except (OSError, ValueError, struct.error, UnicodeDecodeError) as exc:
            raise ModelLoadError(
                f"Cannot read GGUF file {self.path}: {exc}. It is corrupt or truncated; copy it again."
            ) from exc

    def _parse(self) -> None:
        cur = _Cursor(self.buf)
        if bytes(self.buf[:4]) != MAGIC:
            raise ValueError("it does not start with the GGUF magic bytes")
        cur.pos = 4
        version = cur.scalar("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version} is not supported (2 and 3 are)")
        num_tensors, num_kv = cur.scalar("<Q"), cur.scalar("<Q")
        self.metadata: dict[str, Any] = {}
        for _ in range(num_kv):
            key = cur.string()
            self.metadata[key] = cur.value(cur.scalar("<I"))
        entries = [self._tensor_entry(cur) for _ in range(num_tensors)]
        align = int(self.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        data_start = -(-cur.pos // align) * align
        self.tensors: dict[str, TensorInfo] = {}
        for name, shape, ggml_type, offset in entries:
            info = TensorInfo(name, shape, ggml_type, data_start + offset, tensor_nbytes(ggml_type, shape))
            if info.offset + info.nbytes > len(self.buf):
                raise ValueError(f"tensor {name} ends past the end of the file")
            self.tensors[name] = info

    @staticmethod
    def _tensor_entry(cur: _Cursor) -> tuple[str, tuple[int, ...], int, int]:
        name = cur.string()
        dims = [cur.scalar("<Q") for _ in range(cur.scalar("<I"))]
        ggml_type, offset = cur.scalar("<I"), cur.scalar("<Q")
        return name, tuple(reversed(dims)), ggml_type, offset

    def string(self, key: str) -> str | None:
        value = self.metadata.get(key)
        return value if isinstance(value, str) else None

    def raw(self, info: TensorInfo) -> np.ndarray:
        """The tensor's bytes, a read-only uint8 view of the memory map."""
        return self.buf[info.offset : info.offset + info.nbytes]
