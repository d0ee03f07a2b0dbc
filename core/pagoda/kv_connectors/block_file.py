"""One KV block in a file: written whole or not at all, verified before it is read.

Layout: a header (magic, format version, block key, namespace, payload size, payload CRC-32, header CRC-32),
the payload (this rank's block, ``KVCacheLayout.block_shape`` of its dtype, as bytes), a trailer (an end
marker and the key again). A file is written under a temporary name, flushed to disk (fsync) and renamed
into place, so a crash leaves either the whole file or a temporary one that no lookup ever reads. On read
the size, every header field, the trailer and the payload's CRC are checked against what the reader
expects: a truncated, torn, foreign (another model, dtype, layout or rank) or corrupted file never serves a
block.
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path

import torch

MAGIC = b"PGDKVBLK"
VERSION = 1
HEADER = struct.Struct("<8sI16s32sQII")  # magic, version, key, namespace, payload bytes, payload crc, header crc
TRAILER = struct.Struct("<8s16s")  # end marker, key
END = b"PGDKVEND"
SUFFIX = ".kv"
TEMP_SUFFIX = ".tmp"


def path_of(folder: Path, key: bytes) -> Path:
    """Where the block ``key`` lives under ``folder`` (256 subfolders by the key's first byte)."""
    name = key.hex()
    return folder / name[:2] / (name + SUFFIX)


def key_of(path: Path) -> bytes | None:
    """The key a block file's name gives, or None for another file."""
    if path.suffix != SUFFIX:
        return None
    try:
        key = bytes.fromhex(path.stem)
    except ValueError:
        return None
    return key if len(key) == 16 else None


def payload_bytes(block: torch.Tensor) -> memoryview:
    """A host block's bytes (no copy)."""
    return memoryview(block.reshape(-1).view(torch.uint8).numpy())


def write_block(path: Path, key: bytes, namespace: str, block: torch.Tensor) -> None:
    """Write ``block`` to ``path`` atomically (temporary file, fsync, rename, fsync of the folder)."""
    payload = payload_bytes(block)
    head = _header(key, namespace, len(payload), zlib.crc32(payload))
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
    try:
        with open(temp, "wb") as f:
            f.write(head)
            f.write(payload)
            f.write(TRAILER.pack(END, key))
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def read_block(path: Path, key: bytes, namespace: str, out: torch.Tensor) -> str | None:
    """Fill ``out`` (a contiguous host block) from ``path``; None if it is the block ``key`` of ``namespace``
    whole, else why not (``out`` then holds garbage)."""
    payload = payload_bytes(out)
    expected = HEADER.size + len(payload) + TRAILER.size
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size != expected:
                return f"{size} bytes, {expected} expected (a torn or foreign file)"
            problem, crc = _check_header(f.read(HEADER.size), key, namespace, len(payload))
            if problem:
                return problem
            if f.readinto(payload) != len(payload):
                return "short payload"
            if TRAILER.unpack(f.read(TRAILER.size)) != (END, key):
                return "bad trailer (a torn file)"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    if zlib.crc32(payload) != crc:
        return "payload CRC mismatch (a corrupted file)"
    return None


def _header(key: bytes, namespace: str, size: int, crc: int) -> bytes:
    body = HEADER.pack(MAGIC, VERSION, key, namespace.encode()[:32].ljust(32, b"\0"), size, crc, 0)
    return body[:-4] + struct.pack("<I", zlib.crc32(body[:-4]))


def _check_header(head: bytes, key: bytes, namespace: str, size: int) -> tuple[str | None, int]:
    """(why the header is not the expected one, or None; the payload CRC it declares)."""
    if len(head) != HEADER.size:
        return "short header", 0
    magic, version, file_key, file_namespace, file_size, crc, head_crc = HEADER.unpack(head)
    if magic != MAGIC or version != VERSION:
        return "not a Pagoda KV block file of this version", 0
    if zlib.crc32(head[:-4]) != head_crc:
        return "header CRC mismatch", 0
    if file_key != key:
        return "another block's key", 0
    if file_namespace.rstrip(b"\0") != namespace.encode()[:32]:
        return "another model, cache dtype, layout or rank (namespace differs)", 0
    if file_size != size:
        return f"payload of {file_size} bytes, {size} expected", 0
    return None, crc


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable (where the platform can open folders)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
