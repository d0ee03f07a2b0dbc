"""A low-latency all-reduce for the sums of decode steps at tensor parallelism on one host.

NCCL takes ~16 us a sum and torch's one-shot symmetric-memory path ~8 us (a copy, a barrier, a
read over the link); a decode step of Llama-3.1-8B at TP=2 runs 64 of them. Here one kernel per
sum pushes each 8 bytes of this rank's partial sums together with a flag straight into every peer's
buffer and sums what arrives in its own (``csrc/kernels/ll_all_reduce.h``: the protocol and why it
is race-free): one one-way link latency, no barrier. It is launched as a programmatic dependent, so
the kernels around it stay chained, and its epoch lives in device memory, so CUDA graphs replay it.

Used where ``PAGODA_SYMM_ALL_REDUCE=ll``, for messages up to :data:`MAX_BYTES` (64 tokens of hidden
4096 in bf16); larger ones go to ``fallback`` (the one-shot path, or None: the backend). :func:`create`
sets it up on every rank of one host together, each step agreed over the backend (all ranks use it
or none), with a probe that checks exact sums.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist

from pagoda.distributed.symm_all_reduce import agreed, probe_sums, rendezvous, symmetric_buffer

logger = logging.getLogger(__name__)

MAX_BYTES = 512 << 10  # a multiple of 8
MAX_RANKS = 8  # kLLMaxRanks in csrc/kernels/ll_all_reduce.h
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
WHAT = "low-latency all-reduce kernel"


class LLAllReduce:
    """``fits(x)`` then ``self(x)``: the sum of ``x`` over the group's ranks (in place here, or the
    fallback's result above :data:`MAX_BYTES`)."""

    def __init__(self, kernels: ModuleType, buffer: torch.Tensor, peers: torch.Tensor, rank: int,
                 fallback: Any = None, max_bytes: int = MAX_BYTES) -> None:
        self.kernels = kernels
        self.buffer = buffer  # uint8, symmetric (kept alive: the peers write into it)
        self.peers = peers  # host int64 [world_size]: each rank's buffer as mapped in this process
        self.state = torch.zeros(2, dtype=torch.int32, device=buffer.device)  # epoch, blocks finished
        self.rank = rank
        self.fallback = fallback
        self.max_bytes = max_bytes

    def _takes(self, x: torch.Tensor) -> bool:
        nbytes = x.numel() * x.element_size()
        return x.dtype in DTYPES and x.is_contiguous() and nbytes % 8 == 0 and nbytes <= self.max_bytes \
            and x.data_ptr() % 8 == 0

    def fits(self, x: torch.Tensor) -> bool:
        return self._takes(x) or (self.fallback is not None and self.fallback.fits(x))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self._takes(x):
            return self.fallback(x)
        self.kernels.ll_all_reduce(x, self.peers, self.state, self.rank, self.max_bytes)
        return x


def create(kernels: ModuleType | None, group, device: torch.device, world_size: int,
           fallback: Any = None) -> LLAllReduce | None:
    """Every rank of ``group`` (one host) calls this together; None unless every step succeeds everywhere."""
    nbytes = agreed(lambda: _buffer_bytes(kernels, world_size), group, device, WHAT)
    if nbytes is None:
        return None
    buffer = agreed(lambda: symmetric_buffer(nbytes, device).zero_(), group, device, WHAT)  # flags 0: no epoch
    handle = None if buffer is None else agreed(lambda: rendezvous(buffer, group), group, device, WHAT)
    peers = None if handle is None else _peer_addresses(buffer, handle, group)
    if peers is None:
        return None
    op = LLAllReduce(kernels, buffer, peers, handle.rank, fallback)
    if agreed(lambda: probe_sums(op, handle.rank, device, world_size), group, device, WHAT) is None:
        return None
    logger.info("Tensor parallel: low-latency all-reduce kernel for sums up to %d KiB", op.max_bytes >> 10)
    return op


def _buffer_bytes(kernels: ModuleType | None, world_size: int) -> int:
    if kernels is None or not hasattr(kernels, "ll_all_reduce"):
        raise RuntimeError("the platform's compiled kernels have no ll_all_reduce")
    if world_size > MAX_RANKS:
        raise RuntimeError(f"{world_size} ranks; the kernel takes at most {MAX_RANKS}")
    return int(kernels.ll_all_reduce_buffer_bytes(MAX_BYTES, world_size))


def _peer_addresses(buffer: torch.Tensor, handle, group) -> torch.Tensor | None:
    """Host int64 [world_size]: rank p's buffer as mapped here (its allocation's base plus this buffer's
    offset in it), or None on every rank unless that offset is the same on all of them."""
    bases = [int(p) for p in handle.buffer_ptrs]
    offset = buffer.data_ptr() - bases[handle.rank]
    spread = torch.tensor([offset, -offset], dtype=torch.int64, device=buffer.device)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX, group=group)
    if spread.tolist() != [offset, -offset]:
        logger.warning("Tensor parallel: %s unavailable (the symmetric buffers sit at different offsets)", WHAT)
        return None
    return torch.tensor([base + offset for base in bases], dtype=torch.int64)
