"""Block keys: what KV connectors store blocks by (:mod:`pagoda.interfaces.kv_connector`).

The prefix cache keys blocks by Python hashes: fast, 64 bits, and (for the strings naming adapters and
images) different in every process. A connector's store outlives the process and may be shared between
engines, so its blocks are keyed by a 16-byte BLAKE2b digest chained as the hashes are:
``key(i) = blake2b(key(i-1) + tokens of block i + hashes of the images it holds)``, ``key(-1)`` naming the
request's LoRA adapter (or none). Equal keys mean equal whole prefixes, in every process and run; the model
is not part of the key (a connector's storage is per model: ``KVCacheLayout.namespace``).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from pagoda.request import Request

KEY_BYTES = 16
ROOT = hashlib.blake2b(b"pagoda-kv-block-key-v1", digest_size=KEY_BYTES).digest()


def root_key(request: Request) -> bytes:
    """The "parent" key of a request's first block: the base model's, or its LoRA adapter's (by name and folder)."""
    lora = request.lora_request
    if lora is None:
        return ROOT
    return hashlib.blake2b(ROOT + f"lora\0{lora.lora_name}\0{lora.lora_path}".encode(), digest_size=KEY_BYTES).digest()


def block_key(parent: bytes, token_ids: Sequence[int], content: tuple[str, ...] = ()) -> bytes:
    """The key of one full block after the prefix keyed ``parent``."""
    digest = hashlib.blake2b(parent, digest_size=KEY_BYTES)
    digest.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    for image_hash in content:
        digest.update(b"\0image\0" + image_hash.encode())
    return digest.digest()


class BlockKeys:
    """The keys of requests' full blocks, computed as far as asked and kept until the request is forgotten."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self._keys: dict[str, list[bytes]] = {}

    def first(self, request: Request, num_blocks: int) -> list[bytes]:
        """The keys of the request's first ``num_blocks`` blocks (full blocks of known tokens only)."""
        return self._extend(request, num_blocks)[:num_blocks]

    def key(self, request: Request, index: int) -> bytes:
        """The key of the request's block ``index`` (a full block of known tokens)."""
        return self._extend(request, index + 1)[index]

    def _extend(self, request: Request, num_blocks: int) -> list[bytes]:
        keys = self._keys.setdefault(request.request_id, [])
        bs = self.block_size
        tokens = request.token_ids
        for i in range(len(keys), num_blocks):
            content = request.content_keys(i * bs, (i + 1) * bs) if request.mm_items else ()
            keys.append(block_key(keys[-1] if keys else root_key(request), tokens[i * bs : (i + 1) * bs], content))
        return keys

    def forget(self, request_id: str) -> None:
        self._keys.pop(request_id, None)
