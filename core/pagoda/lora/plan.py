"""Which rows of a step run with which adapter slot: the :class:`LoRAPlan` every LoRA layer of the step reads.

A step's tokens are packed request after request, the one-token decodes first. The plan splits them
the way the kernels work (Punica's two shapes):

- **decode rows** (BGMV, a batched gather matrix-vector product): the leading one-token requests, one
  row each, each with its own slot (``-1``: no adapter, the row is skipped). The kernels take them in
  **decode blocks**: each slot's rows in blocks of up to ``DECODE_BLOCK`` (padded with ``-1``), so that a
  block's rows share one adapter's matrices;
- **segments** (SGMV, a segmented gather matrix product): each longer request with an adapter is a run of
  rows ``[start, end)`` sharing one slot; requests without an adapter get no segment.

A decode step replayed as a device graph uses the graph plan instead: every row of the graph's size is a
decode row; the rows' slots and the decode blocks are read from a static device buffer written before each
replay (:func:`write_graph_plan`), and the kernels launch the most blocks a step of that size can have
(:func:`max_decode_blocks`), those past the step's own doing nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

NO_SLOT = -1
DECODE_BLOCK = 16  # decode rows per block (one BGMV program's rows)


@dataclass
class LoRAPlan:
    """The LoRA rows of one step (module docstring)."""

    decode_slots: torch.Tensor  # [>= decode rows] int32: the slot of each decode row (-1: none)
    block_slots: torch.Tensor  # [>= decode blocks] int32: each decode block's slot (-1: an unused block)
    block_rows: torch.Tensor  # [decode blocks * DECODE_BLOCK] int32: each block's rows (-1: none)
    decode_rows: int | None  # how many leading rows are decode rows; None: all rows of the input (graphs)
    segments: torch.Tensor | None  # [num_segments, 3] int32: start row, end row, slot
    num_segments: int
    max_segment_len: int
    groups: list[tuple[int, torch.Tensor]] | None  # the torch path: (slot, its row indices [n] int64) per slot

    def num_decode_rows(self, num_rows: int) -> int:
        return num_rows if self.decode_rows is None else self.decode_rows

    def num_decode_blocks(self, num_rows: int, num_slots: int) -> int:
        """The decode blocks the kernels launch: the step's, or for a graph the most its size can have."""
        if self.decode_rows is None:
            return max_decode_blocks(num_rows, num_slots)
        return self.block_slots.shape[0]


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
    block_slots, block_rows = decode_blocks(slots[:decodes])
    nb = len(block_slots)
    host = np.asarray(slots[:decodes] + block_slots + block_rows + [v for seg in segments for v in seg], dtype=np.int32)
    packed = torch.from_numpy(host).to(device, non_blocking=True)
    rest = decodes + nb * (1 + DECODE_BLOCK)
    return LoRAPlan(
        decode_slots=packed[:decodes], block_slots=packed[decodes : decodes + nb],
        block_rows=packed[decodes + nb : rest], decode_rows=decodes,
        segments=packed[rest:].view(-1, 3) if segments else None, num_segments=len(segments),
        max_segment_len=max((end - start for start, end, _ in segments), default=0),
        groups=_groups(slots, starts, device) if groups else None,
    )


def decode_blocks(slots: list[int]) -> tuple[list[int], list[int]]:
    """The decode blocks of rows with ``slots``: each block's slot, and each block's rows (``DECODE_BLOCK``
    entries, padded with -1); each slot's rows in blocks of up to ``DECODE_BLOCK``, rows of slot -1 in none."""
    rows_of: dict[int, list[int]] = {}
    for row, slot in enumerate(slots):
        if slot != NO_SLOT:
            rows_of.setdefault(slot, []).append(row)
    block_slots: list[int] = []
    block_rows: list[int] = []
    for slot, rows in rows_of.items():
        for i in range(0, len(rows), DECODE_BLOCK):
            chunk = rows[i : i + DECODE_BLOCK]
            block_slots.append(slot)
            block_rows += chunk + [NO_SLOT] * (DECODE_BLOCK - len(chunk))
    return block_slots, block_rows


def max_decode_blocks(rows: int, num_slots: int) -> int:
    """The most decode blocks ``rows`` rows over ``num_slots`` slots can take: a slot's rows fill whole
    blocks but for its last, so at most one partly filled block per slot beyond ``ceil(rows / DECODE_BLOCK)``."""
    return 0 if rows == 0 else -(-rows // DECODE_BLOCK) + min(num_slots, rows) - 1


def graph_buffer_size(max_rows: int, num_slots: int) -> int:
    """int32 entries of a graph plan's static buffer: rows' slots, blocks' slots, blocks' rows."""
    blocks = max_decode_blocks(max_rows, num_slots)
    return max_rows + blocks * (1 + DECODE_BLOCK)


def graph_plan(static: torch.Tensor, max_rows: int, num_slots: int) -> LoRAPlan:
    """The plan captured decode steps run with: views of the static buffer (:func:`graph_buffer_size`
    entries) that :func:`write_graph_plan` fills before each replay."""
    blocks = max_decode_blocks(max_rows, num_slots)
    return LoRAPlan(static[:max_rows], static[max_rows : max_rows + blocks], static[max_rows + blocks :], None,
                    None, 0, 0, None)


def write_graph_plan(host: np.ndarray, slots: list[int], max_rows: int, num_slots: int) -> None:
    """Fill ``host`` (int32, the static buffer's layout) with the plan of decode rows of ``slots``."""
    blocks = max_decode_blocks(max_rows, num_slots)
    block_slots, block_rows = decode_blocks(slots)
    host.fill(NO_SLOT)
    host[: len(slots)] = slots
    host[max_rows : max_rows + len(block_slots)] = block_slots
    host[max_rows + blocks : max_rows + blocks + len(block_rows)] = block_rows


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
