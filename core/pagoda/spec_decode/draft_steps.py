"""One step of a draft round as a single program: forward, LM head and argmax, the argmax left on
the device as the next step's input.

A step runs ``q`` query slots for each of ``size`` rows (``q = 1``, or ``q = 2`` for a round's
first step when a row has two known tokens to catch up: the last draft and the target's token
after all drafts were accepted). Row ``i`` owns slots ``[i * q, (i + 1) * q)``, its real tokens
first; as in verify graphs (:mod:`pagoda.spec_decode.verify_graphs`) its sequence length is its
context plus ``q``, so its real queries sit at their true positions, and its padding slots write
no KV (slot -1) and are never read. Each row's last real query (``last_index``) goes through the
LM head; the argmax is written into ``next_ids``, which *is* the ``q = 1`` step's ``input_ids``:
the next step is fed the draft without leaving the device.

Where the draft model has device graphs (:meth:`DraftSteps.capture`), every step of each captured
batch size and ``q`` is one graph over static buffers: a step is a copy of its packed inputs into
them (:meth:`StepBuffers.load`) and one replay. Elsewhere (CPU, ``--enforce-eager``, batches past
the largest captured size) the same program runs eagerly on buffers made for the round.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from pagoda.runner.batch import Shapes, layout, views
from pagoda.runner.graphs import CAPTURE_SIZES
from pagoda.interfaces.attention import AttentionMetadata
from pagoda.interfaces.model import ForwardContext
from pagoda.layers.argmax import argmax

logger = logging.getLogger("pagoda")
I64, I32 = np.dtype(np.int64), np.dtype(np.int32)
MAX_QUERY = 2  # query slots of a round's first step: a row catches up at most its last draft and the target's token


def step_shapes(size: int, q: int) -> Shapes:
    """A step's packed inputs; everything before ``query_start_loc`` is copied in each step (the
    record), ``query_start_loc`` is the same for every step of a layout and written once."""
    shapes: Shapes = dict(input_ids=((size * q,), I64), positions=((size * q,), I64), slot_mapping=((size * q,), I64),
                          seq_lens=((size,), I32))
    if q > 1:
        shapes["last_index"] = ((size,), I64)  # the slot of each row's last real query
    shapes["query_start_loc"] = ((size + 1,), I32)
    return shapes


@functools.cache
def record_dtype(size: int, q: int) -> np.dtype:
    """A numpy record with the layout of a step's copied inputs (bytes ``[0, record bytes)`` of its
    buffer), so that a round's steps are written with a few array assignments into one host buffer."""
    shapes = step_shapes(size, q)
    offsets, _ = layout(shapes)
    names = [name for name in shapes if name != "query_start_loc"]
    return np.dtype({"names": names, "formats": [(shapes[n][1], shapes[n][0]) for n in names],
                     "offsets": [offsets[n] for n in names], "itemsize": offsets["query_start_loc"]})


@dataclass
class StepBuffers:
    """The device inputs of one step layout (``size`` rows of ``q`` slots), views of ``region``."""

    size: int
    q: int
    region: torch.Tensor  # [layout bytes] uint8
    inputs: dict[str, torch.Tensor]  # step_shapes(size, q) views
    next_ids: torch.Tensor  # [size] int64: where the argmax goes (the q = 1 layout's input_ids)
    ids_bytes: int  # the record's leading input_ids (16-byte aligned)
    record_bytes: int

    def load(self, record: torch.Tensor, with_ids: bool = True) -> None:
        """Copy a step's record (``[record_bytes]`` uint8 on the device) in; without ids, the
        ``input_ids`` keep what the step before wrote (its argmax)."""
        start = 0 if with_ids else self.ids_bytes
        self.region[start : self.record_bytes].copy_(record[start:])


def make_buffers(region: torch.Tensor, size: int, q: int, next_ids: torch.Tensor | None = None) -> StepBuffers:
    """Step buffers laid out in ``region``, as padding rows, ``query_start_loc`` set; ``next_ids``:
    the q = 1 buffers' input ids of this size (None: its own, for q = 1)."""
    shapes = step_shapes(size, q)
    offsets, _ = layout(shapes)
    t = views(region, shapes, offsets)
    region.zero_()
    t["slot_mapping"].fill_(-1)
    t["seq_lens"].fill_(q)
    t["query_start_loc"].copy_(torch.arange(0, (size + 1) * q, q, dtype=torch.int32))
    return StepBuffers(size, q, region, t, t["input_ids"] if next_ids is None else next_ids,
                       offsets["positions"], offsets["query_start_loc"])


def make_pair(size: int, q: int, device: torch.device) -> tuple[StepBuffers, StepBuffers]:
    """New buffers for a round's first step (``q`` slots) and its later ones (one slot), the
    first step's argmax written into the later ones' input ids (the same buffers where q = 1)."""
    single = make_buffers(_region(size, 1, device), size, 1)
    return (single if q == 1 else make_buffers(_region(size, q, device), size, q, single.next_ids)), single


class DraftSteps:
    """The draft model's step programs: captured as device graphs per batch size and ``q``, or eager."""

    def __init__(self, runner, max_model_len: int) -> None:
        self.runner = runner  # pagoda.runner.model_runner.ModelRunner of the draft model
        self.max_model_len = max_model_len
        self.width = -(-max_model_len // runner.block_size)  # block-table columns of the graphs
        self.sizes: list[int] = []  # captured batch sizes (none: every step runs eagerly)
        self.table: torch.Tensor | None = None  # [largest size, width] int32: the graphs' block tables
        self._graphs: dict[tuple[int, int], tuple] = {}  # (size, q) -> (replay, StepBuffers, ForwardContext)

    # -- set-up ------------------------------------------------------------------------------
    def capture(self, max_num_seqs: int) -> None:
        """Record a graph for each captured size, with one query slot and with MAX_QUERY."""
        start, platform = time.perf_counter(), self.runner.platform
        sizes = [s for s in CAPTURE_SIZES if s <= max_num_seqs] or [1]
        device = platform.device()
        self.table = torch.zeros((sizes[-1], self.width), dtype=torch.int32, device=device)
        with platform.inference_context():
            for size in sizes[::-1]:  # largest first: the smaller ones reuse its memory
                first, single = make_pair(size, MAX_QUERY, device)
                for buffers in (single, first):
                    self._graphs[size, buffers.q] = self._capture_one(buffers)
        self.sizes = sizes
        logger.info("Captured %d draft step graphs (batch 1-%d, 1 and %d query slots) in %.1f s", len(self._graphs),
                    sizes[-1], MAX_QUERY, time.perf_counter() - start)

    def _capture_one(self, buffers: StepBuffers) -> tuple:
        meta = _metadata(buffers, self.table[: buffers.size], self.max_model_len)
        context = ForwardContext(self.runner.attention.prepare(meta), self.runner.kv_caches)
        self.program(buffers, context)  # warm-up: kernel compilation and workspaces outside the capture
        self.runner.platform.synchronize()
        replay, _ = self.runner.platform.capture_graph(lambda: self.program(buffers, context))
        return replay, buffers, context  # the context lives as long as the graph (see runner/graphs.py)

    # -- each round --------------------------------------------------------------------------
    def size_for(self, num_rows: int, table_columns: int) -> int | None:
        """The captured size a round of ``num_rows`` rows replays at, or None (eager)."""
        if table_columns > self.width:
            return None
        return next((s for s in self.sizes if s >= num_rows), None)

    def buffers(self, size: int, q: int, graphed: bool) -> tuple[StepBuffers, StepBuffers]:
        """A round's buffers for its first step (``q`` slots) and its later ones (one slot): the
        captured ones, or new ones for an eager round."""
        if graphed:
            return self._graphs[size, q][1], self._graphs[size, 1][1]
        return make_pair(size, q, self.runner.platform.device())

    def bind_table(self, staged: torch.Tensor, graphed: bool) -> torch.Tensor:
        """The block tables ``[rows, columns]`` a round's steps read: copied into the graphs'
        static table (its other entries are earlier rounds' block ids: valid, read by padding
        queries only), or ``staged`` itself for an eager round."""
        if not graphed:
            return staged
        self.table[: staged.shape[0], : staged.shape[1]].copy_(staged)
        return self.table[: staged.shape[0]]

    def run(self, buffers: StepBuffers, graphed: bool, table: torch.Tensor, max_seq_len: int) -> None:
        """One step over ``buffers`` (loaded): its argmax lands in ``buffers.next_ids``."""
        if graphed:
            self.replay(buffers.size, buffers.q)
            return
        meta = _metadata(buffers, table, max_seq_len)
        self.program(buffers, ForwardContext(self.runner.attention.prepare(meta), self.runner.kv_caches))

    def replay(self, size: int, q: int) -> None:
        """Replay the captured step of (size, q) on whatever its buffers hold."""
        self._graphs[size, q][0]()

    def program(self, buffers: StepBuffers, context: ForwardContext) -> torch.Tensor:
        """The step itself: forward, each row's last real query through the LM head, argmax."""
        t, model = buffers.inputs, self.runner.model
        hidden = model(t["input_ids"], t["positions"], context)  # [size * q, hidden]
        if buffers.q > 1:
            hidden = hidden.index_select(0, t["last_index"])  # [size, hidden]
        logits = model.compute_logits(hidden)  # [size, vocab] float32
        return argmax(logits, out=buffers.next_ids)  # [size]


def _region(size: int, q: int, device: torch.device) -> torch.Tensor:
    return torch.empty(layout(step_shapes(size, q))[1], dtype=torch.uint8, device=device)


def _metadata(buffers: StepBuffers, table: torch.Tensor, max_seq_len: int) -> AttentionMetadata:
    t, q = buffers.inputs, buffers.q
    return AttentionMetadata(slot_mapping=t["slot_mapping"], block_tables=table, query_start_loc=t["query_start_loc"],
                             seq_lens=t["seq_lens"], max_query_len=q, max_seq_len=max_seq_len,
                             num_decodes=buffers.size if q == 1 else 0)
