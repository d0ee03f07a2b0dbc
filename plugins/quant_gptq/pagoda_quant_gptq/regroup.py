"""The order in which the kernels read a layer's input rows: grouped, whole kernel groups.

The kernels (pagoda-quant-awq's) take one scale and zero point per run of ``E`` consecutive input
rows, ``E`` of 32, 64 or 128. A checkpoint's rows belong to groups by ``g_idx`` (act-order: any row
to any group) or by ``k // group_size``. :func:`plan_rows` sorts the rows by group (stable) and pads
each group's run with rows that read a zero input up to a multiple of ``E``, choosing the ``E`` that
pads least (the largest among equals). The layer then gathers its input once per call in that order
(``x[:, order]``, a zero column appended where there are pad rows) instead of looking up a group
per row.

- No act-order, ``K`` a multiple of the group size: no padding, ``E`` is the group size and the
  order is the identity (no gather at all).
- Act-order on one rank: every group has exactly ``group_size`` rows, so it is a permutation.
- Act-order on a tensor-parallel row split: a rank holds any number of each group's rows; their runs
  are padded (at most ``E - 1`` rows per group).
- One group of all inputs (per channel): ``E`` is 128, 64 or 32, whichever pads ``K`` least.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KERNEL_GROUPS = (128, 64, 32)  # largest first: ties keep the larger group (fewer scales)


@dataclass
class RowPlan:
    """This rank's input rows as the kernels read them: ``K'`` rows in runs of ``group`` per scale."""

    order: torch.Tensor  # [K'] long: the input row behind each kernel row; K (a zero column) for a pad row
    row_groups: torch.Tensor  # [K' / group] long: the checkpoint group whose scale each run uses
    group: int  # E
    identity: bool  # order is 0..K-1: the input is read as it is
    padded: bool  # some rows read the zero column

    @property
    def rows(self) -> int:
        return self.order.numel()


def kernel_group(counts: torch.Tensor) -> int:
    """The ``E`` of :data:`KERNEL_GROUPS` that pads runs of ``counts`` rows least."""
    padded = {e: int(((counts + e - 1) // e * e).sum()) for e in KERNEL_GROUPS}
    return min(KERNEL_GROUPS, key=lambda e: (padded[e], -e))


def plan_rows(gid: torch.Tensor, groups: int) -> RowPlan:
    """``gid`` [K]: the group (0..groups-1) of each input row -> the rows' kernel order."""
    k = gid.numel()
    counts = torch.bincount(gid, minlength=groups)  # [G]
    e = kernel_group(counts)
    runs = (counts + e - 1) // e  # kernel groups per checkpoint group
    padded = runs * e
    perm = torch.sort(gid, stable=True).indices  # rows grouped, in their order within a group
    sorted_gid = gid[perm]
    rank_in_group = torch.arange(k, device=gid.device) - (torch.cumsum(counts, 0) - counts)[sorted_gid]
    position = (torch.cumsum(padded, 0) - padded)[sorted_gid] + rank_in_group
    order = torch.full((int(padded.sum()),), k, dtype=torch.long, device=gid.device)
    order[position] = perm
    row_groups = torch.repeat_interleave(torch.arange(groups, device=gid.device), runs)
    identity = order.numel() == k and bool((order == torch.arange(k, device=gid.device)).all())
    return RowPlan(order, row_groups, e, identity, order.numel() > k)
