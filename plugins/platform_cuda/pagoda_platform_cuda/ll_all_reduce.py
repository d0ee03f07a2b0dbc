"""A low-latency all-reduce for the sums of decode steps at tensor parallelism on one host.

NCCL takes ~16 us a sum and torch's one-shot symmetric-memory path ~8 us (a copy, a barrier, a
read over the link); a decode step of Llama-3.1-8B at TP=2 runs 64 of them. Here one kernel per
sum pushes each 8 bytes of this rank's partial sums together with a flag straight into every peer's
buffer and sums what arrives in its own (``csrc/kernels/ll_all_reduce.h``: the protocol and why it
is race-free): one one-way link latency, no barrier. It is launched as a programmatic dependent, so
the kernels around it stay chained, and its epoch lives in device memory, so CUDA graphs replay it.
A second kernel fuses the residual add and RMSNorm after the sum (``add_rms_norm``: the decoder's
norms sum the row-parallel layers' partial outputs, :meth:`pagoda.layers.norm.RMSNorm.take_all_reduce_of`),
bit for bit the unfused sequence at two ranks.

Used unless the engine runs with ``disable_custom_all_reduce``, for messages up to :data:`MAX_BYTES` (64
tokens of hidden 4096 in bf16); larger ones go to ``fallback`` (the one-shot path, or None: the backend). :func:`create`
sets it up on every rank of one host together, each step agreed over the backend (all ranks use it
or none), with a probe that checks exact sums and the fused norm against the csrc one.
"""

from __future__ import annotations

import logging
from types import ModuleType
import torch
import torch.distributed as dist

from pagoda.interfaces.parallel import FastAllReduce
from pagoda.distributed.symm_all_reduce import agreed, probe_sums, rendezvous, same_history, symmetric_buffer

logger = logging.getLogger(__name__)

MAX_BYTES = 512 << 10  # a multiple of 8
MAX_RANKS = 8  # kLLMaxRanks in csrc/kernels/ll_all_reduce.h
MAX_ROW_BYTES = 32768  # kLLNormMaxRowBytes there: the fused norm's rows (hidden 16384 in bf16)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
WHAT = "low-latency all-reduce kernel"


class LLAllReduce(FastAllReduce):
    """``fits(x)`` then ``self(x)``: the sum of ``x`` over the group's ranks (in place here, or the
    fallback's result above :data:`MAX_BYTES`); ``add_rms_norm`` fuses the norm after it."""

    def __init__(self, kernels: ModuleType, buffer: torch.Tensor, peers: torch.Tensor, rank: int,
                 fallback: FastAllReduce | None = None, max_bytes: int = MAX_BYTES) -> None:
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

    def fits_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
        row_bytes = x.shape[-1] * x.element_size()
        return (self._takes(x) and x.dim() == 2 and row_bytes % 16 == 0
                and row_bytes <= MAX_ROW_BYTES and residual.shape == x.shape and residual.dtype == x.dtype
                and residual.is_contiguous() and weight.dtype == x.dtype and weight.is_contiguous()
                and all(t.data_ptr() % 16 == 0 for t in (x, residual, weight)))

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """In place: ``x`` [T, hidden] gets the normed output, ``residual`` the sum."""
        self.kernels.ll_all_reduce_add_rms_norm(x, residual, weight, eps, self.peers, self.state, self.rank,
                                                self.max_bytes)
        return x, residual


def create(kernels: ModuleType | None, group, device: torch.device, world_size: int,
           fallback: FastAllReduce | None = None) -> LLAllReduce | None:
    """Every rank of ``group`` (one host) calls this together; None unless every step succeeds everywhere."""
    if not same_history(group, device, WHAT):
        return None
    nbytes = agreed(lambda: _buffer_bytes(kernels, world_size), group, device, WHAT)
    if nbytes is None:
        return None
    buffer = agreed(lambda: symmetric_buffer(nbytes, device).zero_(), group, device, WHAT)  # flags 0: no epoch
    handle = None if buffer is None else agreed(lambda: rendezvous(buffer, group), group, device, WHAT)
    peers = None if handle is None else _peer_addresses(buffer, handle, group)
    if peers is None:
        return None
    op = LLAllReduce(kernels, buffer, peers, handle.rank, fallback)
    if agreed(lambda: _probe(op, device, world_size), group, device, WHAT) is None:
        return None
    logger.info("Tensor parallel: low-latency all-reduce kernel for sums up to %d KiB (fused with the residual "
                "add and RMSNorm after it)", op.max_bytes >> 10)
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


def _probe(op: LLAllReduce, device: torch.device, world_size: int) -> bool:
    """Exact sums (:func:`probe_sums`), then the fused op on exact per-rank values against the csrc
    ``fused_add_rms_norm`` of the exact sum: equal to the bit. Every kernel runs before any verdict, so
    the ranks stay in step even where one of them sees a wrong answer."""
    try:
        sums_ok = probe_sums(op, op.rank, device, world_size)
    except RuntimeError:
        sums_ok = False
    tokens, hidden = 3, 256
    base = torch.arange(tokens * hidden, device=device).view(tokens, hidden) % 7
    wrong = []
    for dtype in (torch.bfloat16, torch.float16):
        total = (base * world_size + sum(range(world_size))).to(dtype)
        residual = (torch.arange(tokens * hidden, device=device).view(tokens, hidden) % 5 - 2).to(dtype)
        weight = torch.linspace(0.5, 1.5, hidden, device=device).to(dtype)
        expected, expected_residual = total.clone(), residual.clone()
        op.kernels.fused_add_rms_norm(expected, expected_residual, weight, 1e-6)
        x = (base + op.rank).to(dtype)
        op.kernels.ll_all_reduce_add_rms_norm(x, residual, weight, 1e-6, op.peers, op.state, op.rank, op.max_bytes)
        if not (torch.equal(x, expected) and torch.equal(residual, expected_residual)):
            wrong.append(str(dtype))
    if not sums_ok or wrong:
        raise RuntimeError(f"the probe gave wrong results (sums {'right' if sums_ok else 'wrong'}; "
                           f"fused with the norm wrong in: {', '.join(wrong) or 'none'})")
    return True
