"""Which rows of a step run with which adapter slot: the :class:`LoRAPlan` every LoRA layer of the step reads.

A step's tokens are packed request after request, the one-token decodes first. The plan splits them
the way the kernels work (Punica's two shapes):

- **decode rows** (BGMV, a batched gather matrix-vector product): the leading one-token requests, one
  row each, each with its own slot (``-1``: no adapter, the row is skipped);
- **segments** (SGMV, a segmented gather matrix product): each longer request with an adapter is a run of
  rows ``[start, end)`` sharing one slot; requests without an adapter get no segment.

A decode step replayed as a device graph uses the graph plan instead: every row of the graph's size is a
decode row, its slot read from a static device buffer written before each replay (``decode_rows=None``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NO_SLOT = -1


@dataclass
class LoRAPlan:
    """The LoRA rows of one step (module docstring)."""

    decode_slots: torch.Tensor  # [>= decode rows] int32: the slot of each decode row (-1: none)
    decode_rows: int | None  # how many leading rows are decode rows; None: all rows of the input (graphs)
    segments: torch.Tensor | None  # [num_segments, 3] int32: start row, end row, slot
    num_segments: int
    max_segment_len: int
    groups: list[tuple[int, torch.Tensor]] | None  # the torch path: (slot, its row indices [n] int64) per slot

    def num_decode_rows(self, num_rows: int) -> int:
        return num_rows if self.decode_rows is None else self.decode_rows


def build_plan(slots: list[int], counts: list[int], device: torch.device, groups: bool) -> LoRAPlan | None:
    """The plan of a step whose request ``i`` computes ``counts[i]`` tokens with slot ``slots[i]`` (-1: no
    adapter), or None when no request has one. ``groups``: also list each slot's rows (the torch path)."""
    if all(slot == NO_SLOT for slot in slots):
        return None
    decodes = _leading_ones(counts)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    segments = [(int(starts[i]), int(starts[i + 1]), slot) for i, slot in enumerate(slots[decodes:], decodes)
                if slot != NO_SLOT]
    host = np.asarray(slots[:decodes] + [v for seg in segments for v in seg], dtype=np.int32)
    packed = torch.from_numpy(host).to(device, non_blocking=True)
    return LoRAPlan(
        decode_slots=packed[:decodes], decode_rows=decodes,
        segments=packed[decodes:].view(-1, 3) if segments else None, num_segments=len(segments),
        max_segment_len=max((end - start for start, end, _ in segments), default=0),
        groups=_groups(slots, starts, device) if groups else None,
    )


def graph_plan(decode_slots: torch.Tensor) -> LoRAPlan:
    """The plan a captured decode step runs with: each row's slot in the static ``decode_slots``."""
    return LoRAPlan(decode_slots, None, None, 0, 0, None)


def _groups(slots: list[int], starts: np.ndarray, device: torch.device) -> list[tuple[int, torch.Tensor]]:
    rows: dict[int, list[np.ndarray]] = {}
    for i, slot in enumerate(slots):
        if slot != NO_SLOT:
            rows.setdefault(slot, []).append(np.arange(starts[i], starts[i + 1]))
    return [(slot, torch.from_numpy(np.concatenate(runs)).to(device)) for slot, runs in rows.items()]


def _leading_ones(counts: list[int]) -> int:
    n = 0
    while n < len(counts) and counts[n] == 1:
        n += 1
    return n
