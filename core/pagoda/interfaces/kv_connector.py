"""KV connectors: where KV cache blocks go beyond the device's prefix cache, and come back from.

A connector is a store of KV cache blocks keyed by a **block key**: 16 bytes naming a whole prefix (a
chained digest of the block's tokens and every token before it, its LoRA adapter and images; the same in
every process and run, :mod:`pagoda.kv_cache.block_keys`). The engine does the moving; a connector only
answers and keeps bytes:

- **scheduler side** (rank 0, on the engine's thread): :meth:`KVConnector.lookup` says how many of a
  waiting prompt's next blocks, beyond the local prefix cache, it can supply now; :meth:`KVConnector.wants`
  says whether a block just computed should be offered to it.
- **worker side** (every tensor-parallel rank, each with its own heads' part of a block, on that rank's
  transfer thread, one call at a time): :meth:`KVConnector.read` returns a block's bytes in host memory,
  :meth:`KVConnector.write` keeps a computed block's bytes.

A prompt whose blocks a connector supplies waits (without holding up the others) while every rank reads
its blocks and copies them to the device on a stream of its own; it then runs with those tokens computed.
Blocks computed by a step are copied to host memory behind it and handed to ``write`` on the transfer
thread; the next steps do not wait for them. A block a rank cannot read (``read`` returns None) is
recomputed, on every rank, from the first such block on.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

import msgspec
import torch

from pagoda.interfaces.base import Capability
from pagoda.kv_transfer_config import ROLES, KVTransferConfig

BLOCK_KEY_BYTES = 16


@dataclass(frozen=True)
class KVCacheLayout:
    """This rank's KV cache as a connector sees it: one block is ``block_shape`` elements of ``dtype``."""

    num_layers: int  # layers whose cache this rank holds
    layer_block_shape: tuple[int, ...]  # one block of one layer, e.g. (2, block_size, num_kv_heads, head_size)
    dtype: torch.dtype  # the cache's element type (an FP8 type under --kv-cache-dtype fp8)
    block_size: int  # tokens per block
    rank: int  # this rank among world_size: each holds its own heads (tensor parallelism)
    world_size: int
    namespace: str  # hex digest of the model, its files, the cache dtype and scales, this layout and rank

    @property
    def block_shape(self) -> tuple[int, ...]:
        """One block of every layer of this rank: ``(num_layers, *layer_block_shape)``."""
        return (self.num_layers, *self.layer_block_shape)

    @property
    def block_bytes(self) -> int:
        return math.prod(self.block_shape) * torch.tensor([], dtype=self.dtype).element_size()


@dataclass(frozen=True)
class KVConnectorContext:
    """What a connector is built with (one instance per rank)."""

    config: KVTransferConfig  # --kv-transfer-config (or the offload connector --kv-offload-gib describes)
    layout: KVCacheLayout
    # ``host_blocks(n)``: host memory for ``n`` blocks, ``[n, *layout.block_shape]`` of ``layout.dtype``, pinned
    # where the platform copies from pinned memory without staging (a device<->host copy at full speed)
    host_blocks: Callable[[int], torch.Tensor]
    answers_scheduler: bool = True  # rank 0: lookup and wants are called on this instance too


class KVConnector(Capability, ABC):
    """A store of KV cache blocks by block key (module docstring); registered with ``register_kv_connectors``.

    ``lookup``/``wants`` run on the engine's thread, ``read``/``release``/``write``/``flush`` on the rank's
    transfer thread: guard what both touch with a lock. Nothing a connector does may make the engine compute
    with wrong KV: ``read`` returns None for anything it cannot vouch for (a missing, torn or foreign block).
    """

    description: ClassVar[str] = ""
    roles: ClassVar[tuple[str, ...]] = ROLES  # the kv_role values it serves

    def __init__(self, context: KVConnectorContext) -> None:
        self.context = context
        self.config = context.config
        self.layout = context.layout

    # -- scheduler side (rank 0) ----------------------------------------------------------------
    @abstractmethod
    def lookup(self, keys: Sequence[bytes]) -> int:
        """How many of ``keys`` (a waiting prompt's next blocks, in order), from the first on, it can supply now."""

    def wants(self, key: bytes) -> bool:
        """Whether the block ``key``, just computed, should be given to :meth:`write` (default: when it
        saves and cannot supply the block yet)."""
        return self.config.saves and self.lookup([key]) == 0

    def saves_before_output(self) -> bool:
        """Whether a step's tokens wait until its blocks are written (default: producers, whose blocks another
        engine reads as soon as the request's response is out)."""
        return self.config.kv_role == "kv_producer"

    # -- worker side (every rank, on its transfer thread) -------------------------------------
    @abstractmethod
    def read(self, key: bytes) -> torch.Tensor | None:
        """This rank's bytes of block ``key``: a host tensor of ``layout.block_shape`` and ``layout.dtype``,
        unchanged until :meth:`release` of ``key``; None if it cannot supply it (then it and the blocks after
        it are recomputed)."""

    def release(self, key: bytes) -> None:
        """The engine copied the block :meth:`read` returned to the device."""

    @abstractmethod
    def write(self, key: bytes, block: torch.Tensor) -> None:
        """Keep this rank's bytes of a computed block (``block`` is valid during the call only: copy what
        you keep). Raising counts a failed save; the engine goes on."""

    def flush(self) -> None:
        """Called after the writes of one step: finish what ``write`` started (e.g. wait for acknowledgements)."""

    def close(self) -> None:
        """The engine stops: release files, sockets and memory."""


class BlockTransfer(msgspec.Struct, array_like=True, frozen=True):
    """One block to move: the device block and the block's key."""

    block_id: int
    key: bytes


class KVTransferPlan(msgspec.Struct, array_like=True):
    """A step's KV transfers (``SchedulerOutput.kv_transfers``), decided by the scheduler, done on every rank.

    ``loads`` start this step for requests that wait for them (they run in a later step, once every rank has
    the blocks); ``saves`` are blocks whose KV is complete once this step's forward pass ran. A plan with
    neither still makes a step: ranks report the loads that finished.
    """

    loads: dict[str, list[BlockTransfer]] = {}  # request id -> its blocks, in prompt order
    saves: list[BlockTransfer] = []
