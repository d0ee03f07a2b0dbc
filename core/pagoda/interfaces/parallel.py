"""TensorParallel: one rank's view of its tensor-parallel group, and the collectives layers use;
PipelineParallel: its pipeline stage (which decoder layers it holds) and the sends between stages.

Layers receive it through ``BuildContext.tp``. With ``size == 1`` (the default, :data:`SINGLE`)
every collective returns its input untouched: a single-device engine runs no distributed code.
The collectives are torch.distributed's on the group's backend (NCCL/RCCL on GPUs, gloo on CPU,
named by the Platform); NCCL's are asynchronous on the current stream and graph-capturable, so a
captured decode step replays its all-reduces too.

Row-parallel layers followed by a residual add and RMSNorm may leave their sum to that norm
(``LinearBase.defer_all_reduce``, ``RMSNorm.take_all_reduce_of``), which then calls
:meth:`TensorParallel.all_reduce_add_rms_norm`: one kernel where the platform's
:class:`FastAllReduce` has it (``add_rms_norm``), else the all-reduce and the fused norm as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:
    from pagoda.interfaces.ops import CustomOps


class FastAllReduce:
    """A platform's sums for small messages (``Platform.fast_all_reduce``), faster than the backend's.

    Every rank calls each method with the same shapes in the same order, and ``fits*`` must answer
    alike on every rank (shapes, dtypes, layouts only): a rank alone on a path would hang its peers.
    """

    def fits(self, x: torch.Tensor) -> bool:
        """Whether ``self(x)`` takes ``x`` (otherwise the backend sums it)."""
        return False

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of ``x`` over the ranks: ``x`` itself summed in place, or a new tensor."""
        raise NotImplementedError

    def fits_add_rms_norm(self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> bool:
        """Whether :meth:`add_rms_norm` takes these (by default it takes nothing)."""
        return False

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rms_norm(s + residual) * weight, s + residual)`` with ``s`` the sum of ``x`` over the ranks,
        in one go; may write both into ``x`` and ``residual``. Equal on every rank, to the bit."""
        raise NotImplementedError


@dataclass(frozen=True)
class TensorParallel:
    """``rank`` of ``size`` ranks; ``group`` is the torch.distributed process group (None alone)."""

    rank: int = 0
    size: int = 1
    group: Any = None
    fast: FastAllReduce | None = None  # the platform's small-message all-reduce, or None

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum ``x`` over the ranks (row-parallel layers, the vocab-parallel embedding): use the result,
        which is ``x`` summed in place on the backend, or a new tensor from the platform's fast path."""
        if self.size > 1:
            if self.fast is not None and self.fast.fits(x):
                return self.fast(x)
            dist.all_reduce(x, group=self.group)
        return x

    def all_reduce_add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, ops: "CustomOps"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``ops.fused_add_rms_norm(self.all_reduce(x), residual, weight, eps)``: ``x`` holds this rank's
        partial sums. One kernel where the platform's fast path fuses it and the message fits (decode)."""
        if self.size > 1 and self.fast is not None and self.fast.fits_add_rms_norm(x, residual, weight):
            return self.fast.add_rms_norm(x, residual, weight, eps)
        return ops.fused_add_rms_norm(self.all_reduce(x), residual, weight, eps)

    def all_gather_last(self, x: torch.Tensor) -> torch.Tensor:
        """``[n, k]`` on each rank -> ``[n, size * k]`` (rank r's columns at ``[r*k, (r+1)*k)``)."""
        if self.size == 1:
            return x
        x = x.contiguous()  # [n, k]
        out = torch.empty((self.size * x.shape[0], x.shape[1]), dtype=x.dtype, device=x.device)  # [size * n, k]
        _all_gather(out, x, group=self.group)
        return out.view(self.size, x.shape[0], x.shape[1]).transpose(0, 1).reshape(x.shape[0], -1)

    def broadcast(self, x: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Rank ``src``'s ``x`` on every rank, in place (the sampled tokens come from rank 0)."""
        if self.size > 1:
            dist.broadcast(x, group=self.group, group_src=src)  # src: a rank of this group, not of the world
        return x

    def max_floats(self, values: list[float], device: torch.device) -> list[float]:
        """Each of ``values``, the largest over the ranks (every rank passes as many, in the same order)."""
        if self.size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return t.tolist()

    def min_int(self, value: int, device: torch.device) -> int:
        """The smallest ``value`` over the ranks (e.g. KV cache blocks: every rank holds as many)."""
        return _min_over(self.group, value, device) if self.size > 1 else value


SINGLE = TensorParallel()


@dataclass(frozen=True)
class PipelineParallel:
    """Stage ``rank`` of ``size`` pipeline stages: it holds decoder layers ``[start_layer, end_layer)`` (the first
    stage also the embedding, the last the final norm and the LM head) and hands its last layer's hidden states
    and residual to the same tensor-parallel rank of the next stage (``next_peer``, a global rank) over
    torch.distributed point-to-point sends. With ``size == 1`` (the default, :data:`WHOLE`) it holds every layer
    and sends nothing. ``world`` is the group every rank of the engine belongs to."""

    rank: int = 0
    size: int = 1
    start_layer: int = 0
    end_layer: int | None = None  # None: through the last layer
    prev_peer: int | None = None
    next_peer: int | None = None
    world: Any = None

    @property
    def is_first(self) -> bool:
        return self.rank == 0

    @property
    def is_last(self) -> bool:
        return self.rank == self.size - 1

    def layers(self, num_layers: int) -> range:
        """The indices of the decoder layers this stage holds, of a model of ``num_layers``."""
        return range(self.start_layer, num_layers if self.end_layer is None else self.end_layer)

    def send(self, tensors: list[torch.Tensor]) -> list[Any]:
        """Start sending ``tensors`` (contiguous) to the next stage; the works to wait on before they change."""
        return [dist.isend(t, dst=self.next_peer) for t in tensors]

    def recv(self, tensors: list[torch.Tensor]) -> None:
        """Fill ``tensors`` with what the previous stage sent (on NCCL: the current stream waits for them)."""
        for work in [dist.irecv(t, src=self.prev_peer) for t in tensors]:
            work.wait()

    def min_int(self, value: int, device: torch.device) -> int:
        """The smallest ``value`` over every rank of the engine (KV cache blocks: every stage holds as many)."""
        return _min_over(self.world, value, device) if self.size > 1 else value


WHOLE = PipelineParallel()


def join_world(platform, rank: int, size: int, fast_all_reduce: bool = True) -> TensorParallel:
    """This rank's view of the world group (called by every rank together, after init_process_group); with
    ``fast_all_reduce`` (ranks of one host, unless the engine disables it) also the platform's fast all-reduce
    for small messages, if it has one."""
    group = dist.group.WORLD
    return TensorParallel(rank, size, group, platform.fast_all_reduce(group, size) if fast_all_reduce else None)


def join_groups(platform, rank: int, tp_size: int, pp_size: int,
                fast_all_reduce: bool = True) -> tuple[TensorParallel, PipelineParallel]:
    """This rank's tensor-parallel group and pipeline stage, for a world of ``pp_size x tp_size`` ranks where
    global rank ``r`` is tensor-parallel rank ``r % tp_size`` of stage ``r // tp_size`` (every rank calls this
    together). One stage: the world is the tensor-parallel group, as :func:`join_world`."""
    if pp_size == 1:
        return join_world(platform, rank, tp_size, fast_all_reduce), WHOLE
    stage, tp_rank = divmod(rank, tp_size)
    groups = [dist.new_group(list(range(s * tp_size, (s + 1) * tp_size))) for s in range(pp_size)]  # all, in order
    group = groups[stage]
    fast = platform.fast_all_reduce(group, tp_size) if fast_all_reduce and tp_size > 1 else None
    prev_peer = rank - tp_size if stage > 0 else None
    next_peer = rank + tp_size if stage < pp_size - 1 else None
    return (TensorParallel(tp_rank, tp_size, group, fast),
            PipelineParallel(stage, pp_size, prev_peer=prev_peer, next_peer=next_peer, world=dist.group.WORLD))
def _min_over(group: Any, value: int, device: torch.device) -> int:
    t = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=group)
    return int(t.item())


_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.12
