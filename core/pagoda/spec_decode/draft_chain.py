"""A draft round's steps, queued on the device with one copy in and no host sync between them.

Every input of a draft round (:class:`pagoda.spec_decode.draft.DraftProposer`) but the drafts is
known on the host before its first step: row ``i`` computes its known tokens (``fed``: one, or two
when the last round's drafts were all accepted) at positions ``start_i, ...`` in the first step,
which samples its first draft, then one draft per step, each fed the previous step's argmax. So
the first step has one query slot per row, or two where some row has two known tokens
(:mod:`pagoda.spec_decode.draft_steps`), and every step samples a draft: ``k`` drafts take ``k``
steps whatever was accepted. A row started by the draft's runner instead (a new shadow: its
prompt) has no known tokens; its first token is its first draft (``seed``, on the device).

:meth:`DraftChain.run` packs the round into one host buffer — the block tables, then one record
per step (positions, KV slots reserved up front, sequence lengths; known ids in the first) — that
crosses to the device in one copy. Each step is then a device copy of its record into the step's
buffers, the step (a graph replay where the draft has graphs) and a copy of its argmax into the
round's tokens. The host reads the tokens once, after the last step (:mod:`pagoda.spec_decode.draft`).

A row whose steps end before the last one rides along as padding (KV slot -1, position 0): its
outputs are never read.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from pagoda.runner.batch import ALIGN
from pagoda.spec_decode.draft_steps import DraftSteps, record_dtype


@dataclass(frozen=True)
class ChainRow:
    """One row of a round."""

    start: int  # position of its first token (its first known token, or the seed)
    steps: int  # drafts it takes from the round's steps (0: padding in every step)
    blocks: list[int]  # its block table, covering every position the round computes for it
    fed: tuple[int, ...] = ()  # its known tokens (first step); none: its first token is the seed

    @property
    def first_len(self) -> int:
        """Tokens it computes in the first step."""
        return max(len(self.fed), 1)

    @property
    def computed(self) -> int:
        """Tokens whose KV the round computes for it (its last draft's is not)."""
        return self.first_len + self.steps - 1 if self.steps else 0


@dataclass
class RoundArrays:
    """A round's step inputs on the host, padded to ``size`` rows."""

    q: int  # query slots per row in the first step
    first: dict[str, np.ndarray]  # [size * q] input_ids, positions, slot_mapping; [size] seq_lens (, last_index)
    rest: dict[str, np.ndarray]  # [num_steps - 1, size] positions, slot_mapping; seq_lens int32
    table: np.ndarray  # [size, columns] int32 block tables (0 past each row's blocks)
    max_seq_lens: list[int]  # per step (eager steps hand it to the attention backend)


def chain_arrays(rows: list[ChainRow], num_steps: int, size: int, block_size: int, q: int | None = None,
                 columns: int | None = None) -> RoundArrays:
    """Each step's inputs: the first computes every row's known tokens in ``q`` slots (default: the
    most a row has; padding slots: slot -1, position 0; length ``start + q`` so the real ones keep
    their positions), the others one token per row; rows past their steps (and rows
    ``len(rows)..size``) are padding. Computed for all rows at once (a round's host work before its
    first step is the device's idle time)."""
    b, q = len(rows), q or first_slots(rows)
    start, n, steps = (np.zeros(size, dtype=np.int64) for _ in range(3))
    start[:b] = [r.start for r in rows]
    n[:b] = [r.first_len for r in rows]
    steps[:b] = [r.steps for r in rows]
    table, row = block_tables(rows, size, block_size, columns), np.arange(size)
    offset = np.arange(q)
    real = (offset < n[:, None]) & (steps[:, None] > 0)  # [size, q]
    pos = np.where(real, start[:, None] + offset, 0)
    ids = np.zeros((size, q), dtype=np.int64)
    ids[:b] = [(*r.fed, 0, 0)[:q] for r in rows]
    slots = _kv_slots(table, row[:, None], pos, real, block_size)
    first = dict(input_ids=np.where(real, ids, 0).reshape(-1), positions=pos.reshape(-1),
                 slot_mapping=slots.reshape(-1), seq_lens=np.where(steps > 0, start + q, q).astype(np.int32))
    if q > 1:
        first["last_index"] = np.arange(size) * q + np.maximum(n - 1, 0)  # each row's last real query
    later = np.arange(1, num_steps)[:, None]  # [num_steps - 1, 1]: step j feeds draft j
    real = later < steps
    pos = np.where(real, start + n - 1 + later, 0)  # [num_steps - 1, size]
    rest = dict(positions=pos, slot_mapping=_kv_slots(table, row, pos, real, block_size),
                seq_lens=np.where(real, pos + 1, 1).astype(np.int32))
    max_seq_lens = [int(first["seq_lens"].max()), *(int(m) for m in rest["seq_lens"].max(axis=1, initial=1))]
    return RoundArrays(q, first, rest, table, max_seq_lens)


def _kv_slots(table: np.ndarray, row: np.ndarray, pos: np.ndarray, real: np.ndarray, block_size: int) -> np.ndarray:
    """The KV slot of each position (``row``: its row, broadcast to ``pos``), -1 where not ``real``."""
    column = np.minimum(pos // block_size, table.shape[1] - 1)  # padding positions: any column
    return np.where(real, table[row, column].astype(np.int64) * block_size + pos % block_size, -1)


def block_tables(rows: list[ChainRow], size: int, block_size: int, columns: int | None = None) -> np.ndarray:
    """``[size, columns]`` int32 (default: table_columns): each row's blocks, 0 past them."""
    table = np.zeros((size, columns or table_columns(rows, block_size)), dtype=np.int32)
    for i, row in enumerate(rows):
        table[i, : len(row.blocks)] = row.blocks
    return table


def first_slots(rows: list[ChainRow]) -> int:
    """Query slots per row in a round's first step: its most known tokens."""
    return max((r.first_len for r in rows if r.steps), default=1)


def table_columns(rows: list[ChainRow], block_size: int, q: int | None = None) -> int:
    """Block-table columns for every row's blocks and its first step's ``start + q`` keys (a
    padding slot attends one key past the real ones; ``q`` default: the most known tokens a row has)."""
    q = q or first_slots(rows)
    return max([1, *(max(len(r.blocks), -(-(r.start + q) // block_size)) for r in rows if r.steps)])


class DraftChain:
    """Runs draft rounds on a draft model's step programs."""

    def __init__(self, steps: DraftSteps) -> None:
        self.steps = steps
        self.runner = steps.runner  # pagoda.runner.model_runner.ModelRunner of the draft model

    def run(self, rows: list[ChainRow], seed: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens ``[max steps, len(rows)]`` (on the device) sampled at each step; rows without
        ``fed`` tokens start from ``seed`` (``[len(rows)]``, their first drafts, on the device)."""
        if any(bool(r.fed) == (seed is not None) for r in rows if r.steps):
            raise ValueError("a round's rows all have fed tokens (and no seed) or none has (their first drafts: seed)")
        num_steps = max((r.steps for r in rows), default=0)
        platform = self.runner.platform
        with platform.inference_context():
            tokens = torch.empty((num_steps, len(rows)), dtype=torch.long, device=platform.device())
            if num_steps:
                self._queue(rows, seed, tokens)
        return tokens

    def _queue(self, rows: list[ChainRow], seed: torch.Tensor | None, tokens: torch.Tensor) -> None:
        """Stage the round (one copy in), then queue its steps, each step's argmax into ``tokens``."""
        num_steps, b = tokens.shape
        size = self.steps.size_for(b, table_columns(rows, self.runner.block_size))
        graphed, size = size is not None, size or b
        arrays = chain_arrays(rows, num_steps, size, self.runner.block_size)
        table, records, _ = self.stage([arrays], size, num_steps)
        self.queue_steps(Staged(table, records[0], arrays.q, arrays.max_seq_lens), size, graphed, tokens, seed=seed)

    def queue_steps(self, staged: "Staged", size: int, graphed: bool, tokens: torch.Tensor,
                    seed: torch.Tensor | None = None, first_ids: torch.Tensor | None = None) -> None:
        """Queue a staged round's steps, each step's argmax into ``tokens`` (``[steps, rows]``); the first
        step's input ids from its record, or ``seed`` (rows' first drafts), or ``first_ids`` (all its slots)."""
        num_steps, b = tokens.shape
        table = self.steps.bind_table(staged.table, graphed)
        first, later = self.steps.buffers(size, staged.q, graphed)
        for j in range(num_steps):
            step = first if j == 0 else later
            step.load(staged.records[j], with_ids=j == 0 and seed is None)  # later steps keep the argmax as input
            if j == 0 and seed is not None:
                step.next_ids[:b].copy_(seed)
            if j == 0 and first_ids is not None:
                step.inputs["input_ids"].copy_(first_ids)
            self.steps.run(step, graphed, table, staged.max_seq_lens[j])
            tokens[j].copy_(step.next_ids[:b])

    def stage(self, variants: list[RoundArrays], size: int,
              num_steps: int) -> tuple[torch.Tensor, list[list[torch.Tensor]], torch.Tensor]:
        """Rounds of one layout (the block tables of the first) in one host buffer — the table, then
        each round's step records — copied to the device at once; returns the device table, each
        round's step records and all of them ``[rounds, bytes]`` (views of that copy)."""
        arrays = variants[0]
        first_dtype, later_dtype = record_dtype(size, arrays.q), record_dtype(size, 1)
        table_bytes = -(-arrays.table.nbytes // ALIGN) * ALIGN
        record_bytes = [first_dtype.itemsize, *[later_dtype.itemsize] * (num_steps - 1)] * len(variants)
        ends = list(itertools.accumulate([table_bytes, *record_bytes]))
        host = self.runner.platform.host_buffer(ends[-1])
        flat = host.numpy()
        flat[: arrays.table.nbytes] = arrays.table.reshape(-1).view(np.uint8)
        for v, round_arrays in enumerate(variants):
            base = ends[v * num_steps]
            first = flat[base : base + first_dtype.itemsize].view(first_dtype)  # one record
            for name, values in round_arrays.first.items():
                first[name][0] = values
            later = flat[base + first_dtype.itemsize : ends[(v + 1) * num_steps]].view(later_dtype)  # input_ids unread
            for name, values in round_arrays.rest.items():
                later[name] = values
        device = self.runner.platform.device()
        staged = host if device.type == "cpu" else host.to(device, non_blocking=True)
        table = staged[: arrays.table.nbytes].view(torch.int32).view(arrays.table.shape)
        records = [staged[ends[j] : ends[j + 1]] for j in range(len(variants) * num_steps)]
        return (table, [records[v * num_steps : (v + 1) * num_steps] for v in range(len(variants))],
                staged[ends[0] :].view(len(variants), -1))


@dataclass
class Staged:
    """A round's inputs on the device: block tables, one record per step, the first step's query
    slots per row and each step's longest sequence."""

    table: torch.Tensor
    records: list[torch.Tensor]
    q: int
    max_seq_lens: list[int]
