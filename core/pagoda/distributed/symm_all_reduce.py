"""A one-shot all-reduce over peer-to-peer (symmetric) memory for the small sums of decode steps.

NCCL's all-reduce costs ~10 us however small the message; a decode step of Llama-3.1-8B at TP=2
runs 64 of them. Here each rank's input is copied into a buffer every rank of the host can read
(torch's symmetric memory: ``torch.distributed._symmetric_memory``), and one kernel per rank
sums the ranks' buffers (``symm_mem.one_shot_all_reduce_copy``). Plain device kernels, so CUDA
graphs capture them like NCCL's. Messages above ``max_bytes`` (prefill) stay on the backend.

Set up collectively by :func:`create` on every rank of one host; every decision is agreed over
the backend first, so either all ranks use it or none (a rank alone on it would hang its peers).
The CUDA platform puts its low-latency kernel in front of this path for decode-sized sums (platforms
without that kernel: this path alone); ``--disable-custom-all-reduce`` leaves every sum to NCCL. The helpers
here (:func:`agreed`, :func:`same_history`, :func:`symmetric_buffer`, :func:`rendezvous`,
:func:`probe_sums`) serve both. Torch numbers the store exchanges of its rendezvous with one counter
per process, so a process that set symmetric memory up for an earlier engine cannot set it up with
fresh worker processes (its keys never match theirs: the rendezvous would wait forever).
:func:`same_history` finds that case first, and such an engine sums over NCCL.
"""

from __future__ import annotations

import logging
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

from pagoda.interfaces.parallel import FastAllReduce

logger = logging.getLogger(__name__)
T = TypeVar("T")
_rendezvous_calls = 0  # this process's calls of torch's symmetric-memory rendezvous (see same_history)
_history_warned = False

WHAT = "one-shot all-reduce over symmetric memory (NCCL for every sum)"
DEFAULT_MAX_BYTES = 8 << 20  # divided by the ranks: a rank reads (ranks - 1) x the message


class SymmetricAllReduce(FastAllReduce):
    """``fits(x)`` then ``self(x)``: the sum of ``x`` over the group's ranks, as a new tensor."""

    def __init__(self, buffer: torch.Tensor, group_name: str, max_bytes: int):
        self.buffer = buffer  # uint8 [max_bytes], symmetric: viewed as each call's dtype
        self.group_name = group_name
        self.max_bytes = max_bytes

    def fits(self, x: torch.Tensor) -> bool:
        # torch's kernel refuses sizes that are not 4-byte multiples; a model's sums are 16-byte multiples
        nbytes = x.numel() * x.element_size()
        return nbytes <= self.max_bytes and nbytes % 16 == 0 and x.is_contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        staging = self.buffer.view(x.dtype)[: x.numel()]
        return torch.ops.symm_mem.one_shot_all_reduce_copy(staging, x.view(-1), "sum", self.group_name).view_as(x)


def create(group, device: torch.device, world_size: int) -> SymmetricAllReduce | None:
    """Every rank of ``group`` calls this together; ``None`` (and NCCL for every sum) unless all succeed."""
    if not same_history(group, device, WHAT):
        return None
    max_bytes = DEFAULT_MAX_BYTES // world_size
    buffer = agreed(lambda: _allocate(max_bytes, device), group, device, WHAT)
    if buffer is None or agreed(lambda: rendezvous(buffer, group), group, device, WHAT) is None:
        return None
    op = SymmetricAllReduce(buffer, group.group_name, max_bytes)
    rank = dist.get_rank(group)
    if agreed(lambda: probe_sums(op, rank, device, world_size), group, device, WHAT) is None:
        return None
    logger.info("Tensor parallel: one-shot all-reduce over symmetric memory for sums up to %d KiB",
                max_bytes >> 10)
    return op


def _allocate(max_bytes: int, device: torch.device) -> torch.Tensor:
    if not hasattr(torch.ops.symm_mem, "one_shot_all_reduce_copy"):
        raise RuntimeError("this torch has no symm_mem.one_shot_all_reduce_copy")
    return symmetric_buffer(max_bytes, device)


def same_history(group, device: torch.device, what: str) -> bool:
    """True on every rank if all ranks of ``group`` have called torch's rendezvous equally often in their
    processes (so their store keys match), else False on every rank, with a warning naming ``what``."""
    counts = torch.tensor([_rendezvous_calls, -_rendezvous_calls], dtype=torch.int64, device=device)
    dist.all_reduce(counts, op=dist.ReduceOp.MAX, group=group)  # [most, -fewest]
    if counts.tolist() == [_rendezvous_calls, -_rendezvous_calls]:
        return True
    global _history_warned
    log = logger.debug if _history_warned else logger.warning  # the LL path and its fallback both ask: warn once
    _history_warned = True
    log("Tensor parallel: %s unavailable (an engine before this one in this process set symmetric memory "
        "up, and torch cannot set it up again with fresh workers); sums go over NCCL. Start each "
        "tensor-parallel engine in a process of its own for the fast path.", what)
    return False


def symmetric_buffer(nbytes: int, device: torch.device) -> torch.Tensor:
    """uint8 [nbytes] that every rank of a group can map once :func:`rendezvous` has run."""
    import torch.distributed._symmetric_memory as symm_mem

    return symm_mem.empty(nbytes, dtype=torch.uint8, device=device)


def rendezvous(buffer: torch.Tensor, group) -> object:
    import torch.distributed._symmetric_memory as symm_mem

    global _rendezvous_calls
    _rendezvous_calls += 1  # counted when tried: a failed call may have used up keys too
    enable = getattr(symm_mem, "enable_symm_mem_for_group", None)  # needed before torch 2.9, a no-op after
    if enable is not None and not symm_mem.is_symm_mem_enabled_for_group(group.group_name):
        enable(group.group_name)
    return symm_mem.rendezvous(buffer, group)


def probe_sums(op: Callable[[torch.Tensor], torch.Tensor], rank: int, device: torch.device, world_size: int) -> bool:
    """The sum of known per-rank values, in bf16 and fp32, against the exact answer."""
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.arange(1000, device=device, dtype=dtype) % 7 + rank
        expected = (torch.arange(1000, device=device, dtype=dtype) % 7) * world_size + sum(range(world_size))
        got = op(x)
        if not torch.equal(got, expected):
            raise RuntimeError(f"the probe gave wrong sums in {dtype}")
    return True


def agreed(step: Callable[[], T], group, device: torch.device, what: str) -> T | None:
    """``step()`` here, or None unless it succeeded on every rank (a MIN over the backend)."""
    result, ok = None, 1
    try:
        result = step()
    except Exception as exc:  # noqa: BLE001 - any failure means another path for every sum, with the reason logged
        logger.warning("Tensor parallel: %s unavailable (%s)", what, exc)
        ok = 0
    flag = torch.tensor([ok], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return result if flag.item() else None
