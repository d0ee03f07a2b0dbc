"""One-kernel sums over peer memory, alone or fused with the residual add and RMSNorm after them.

A decode step of Llama-3.1-8B at TP=2 sums 64 partial outputs of row-parallel layers, each followed
by a residual add and RMSNorm. NCCL takes ~16 us a sum and torch's one-shot symmetric-memory path
(:mod:`.symm_all_reduce`: a copy, a barrier, a sum) ~8 us, then the norm is one more kernel. Here one
kernel per sum copies this rank's partial into its symmetric buffer, meets each peer through flags in
those buffers, adds the ranks' partials in rank order (the same bits on every rank) and, fused,
applies the residual add and the norm. The protocol and why it is race-free: the comment at the top
of ``csrc/kernels/allreduce_norm.h``. Its epoch lives in device memory, so CUDA graphs replay it.

The kernels come from the platform's compiled csrc module (``peer_all_reduce``,
``peer_all_reduce_add_rms_norm``); :func:`create` sets them up on every rank of one host together,
each step agreed over the backend (all ranks use them or none), with a probe that checks exact
results. Messages above one slot (1 MiB: 64 tokens of hidden 8192 in bf16) go to ``fallback``.
"""

from __future__ import annotations

import logging
from types import ModuleType

import torch
import torch.distributed as dist

from pagoda.distributed.parallel import FastAllReduce
from pagoda.distributed.symm_all_reduce import agreed, probe_sums, rendezvous, switch, symmetric_buffer

logger = logging.getLogger(__name__)

SLOT_BYTES = 1 << 20  # one message at most; the buffer holds two slots (consecutive calls alternate)
MAX_RANKS = 8  # kPeerMaxRanks in csrc/kernels/allreduce_norm.h
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
WHAT = "peer all-reduce kernel"


class PeerAllReduce(FastAllReduce):
    """The csrc peer kernels over this rank's view of the group's symmetric buffers; larger messages
    go to ``fallback`` (torch's one-shot path, or None: the backend)."""

    def __init__(self, kernels: ModuleType, buffer: torch.Tensor, peers: torch.Tensor, rank: int,
                 fallback: FastAllReduce | None, slot_bytes: int = SLOT_BYTES) -> None:
        self.kernels = kernels
        self.buffer = buffer  # uint8, symmetric: flags, then two slots (kept alive: peers map it)
        self.peers = peers  # host int64 [world_size]: each rank's buffer as mapped in this process
        self.state = torch.zeros(2, dtype=torch.int64, device=buffer.device)  # epoch, blocks finished
        self.rank = rank
        self.fallback = fallback
        self.slot_bytes = slot_bytes

    def _takes(self, x: torch.Tensor) -> bool:
        return x.dtype in DTYPES and x.is_contiguous() and x.numel() * x.element_size() <= self.slot_bytes

    def fits(self, x: torch.Tensor) -> bool:
        return self._takes(x) or (self.fallback is not None and self.fallback.fits(x))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self._takes(x):
            return self.fallback(x)
        self.kernels.peer_all_reduce(x, self.peers, self.state, self.rank, self.slot_bytes)
        return x

    def fits_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
        return (self._takes(x) and x.dim() == 2 and residual.shape == x.shape and residual.is_contiguous()
                and residual.dtype == x.dtype and weight.dtype == x.dtype and weight.is_contiguous())

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place: ``x`` [T, hidden] gets the normed output, ``residual`` the sum."""
        self.kernels.peer_all_reduce_add_rms_norm(x, residual, weight, eps, self.peers, self.state, self.rank,
                                                  self.slot_bytes)
        return x, residual


def create(kernels: ModuleType | None, group, device: torch.device, world_size: int,
           fallback: FastAllReduce | None) -> PeerAllReduce | None:
    """Every rank of ``group`` (one host) calls this together; ``None`` unless every step succeeds everywhere
    (``PAGODA_SYMM_ALL_REDUCE=0`` or ``oneshot`` turns it off: see :mod:`.symm_all_reduce`)."""
    if switch() in ("0", "oneshot"):
        return None
    nbytes = agreed(lambda: _buffer_bytes(kernels, world_size), group, device, WHAT)
    if nbytes is None:
        return None
    buffer = agreed(lambda: symmetric_buffer(nbytes, device).zero_(), group, device, WHAT)  # zeroed flags first
    handle = None if buffer is None else agreed(lambda: rendezvous(buffer, group), group, device, WHAT)
    peers = None if handle is None else _peer_addresses(buffer, handle, group)
    if peers is None:
        return None
    op = PeerAllReduce(kernels, buffer, peers, handle.rank, fallback)
    if agreed(lambda: _probe(op, device, world_size), group, device, WHAT) is None:
        return None
    logger.info("Tensor parallel: one-kernel all-reduce (+ residual add and RMSNorm) over peer memory for sums "
                "up to %d KiB", op.slot_bytes >> 10)
    return op


def _buffer_bytes(kernels: ModuleType | None, world_size: int) -> int:
    if kernels is None or not hasattr(kernels, "peer_all_reduce_add_rms_norm"):
        raise RuntimeError("the platform's compiled kernels have no peer_all_reduce")
    if world_size > MAX_RANKS:
        raise RuntimeError(f"{world_size} ranks; the kernels take at most {MAX_RANKS}")
    return int(kernels.peer_all_reduce_buffer_bytes(SLOT_BYTES))


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


def _probe(op: PeerAllReduce, device: torch.device, world_size: int) -> bool:
    """Exact sums (:func:`probe_sums`), then the fused op on exact per-rank values against the csrc
    ``fused_add_rms_norm`` of the exact sum: equal to the bit (the kernels round alike). Every kernel
    runs before any verdict, so the ranks stay in step even where one of them sees a wrong answer."""
    sums_ok = _ran(lambda: probe_sums(op, op.rank, device, world_size))
    tokens, hidden = 3, 256
    base = torch.arange(tokens * hidden, device=device).view(tokens, hidden) % 7
    wrong = []
    for dtype in (torch.bfloat16, torch.float16):
        total = (base * world_size + sum(range(world_size))).to(dtype)
        residual = (torch.arange(tokens * hidden, device=device).view(tokens, hidden) % 5 - 2).to(dtype)
        weight = torch.linspace(0.5, 1.5, hidden, device=device).to(dtype)
        expected, expected_residual = total.clone(), residual.clone()
        op.kernels.fused_add_rms_norm(expected, expected_residual, weight, 1e-6)
        got, got_residual = op.add_rms_norm((base + op.rank).to(dtype), residual.clone(), weight, 1e-6)
        if not (torch.equal(got, expected) and torch.equal(got_residual, expected_residual)):
            wrong.append(str(dtype))
    if not sums_ok or wrong:
        raise RuntimeError(f"the probe gave wrong results (sums {'right' if sums_ok else 'wrong'}; "
                           f"fused with the norm wrong in: {', '.join(wrong) or 'none'})")
    return True


def _ran(check) -> bool:
    try:
        return check()
    except RuntimeError:
        return False
