"""A draft round's one-token steps, queued on the device without a host sync between them.

Every step of a draft round (:class:`pagoda.spec_decode.draft.DraftProposer`) but the fed tokens
is known on the host before the first one runs: row ``i`` computes the token at position
``start_i + j`` in step ``j``, in the KV slot its block table (reserved up front) gives, with
``start_i + j + 1`` tokens of context. The token it is fed is a known one (``fed``: the tokens
the draft has not computed yet, usually the target's last one, two when the last round's drafts
were all accepted) or the argmax of its previous step (a draft). :meth:`DraftChain.run` packs
every step's inputs into one host buffer that crosses to the device in one copy; each step is
then a device copy of its slice into the forward's inputs (the known tokens, plus the previous
tokens where a row feeds a draft), the forward (replaying the draft's decode graph of the padded
batch size where it has one), the LM head and an argmax into the round's token tensor. The host
reads the tokens once, after the last step.

A row whose steps end before the last one rides along as padding from then on (KV slot -1,
position 0, length 1, like a graph's padding rows): its outputs are never read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from pagoda.engine.batch import Shapes, layout, views
from pagoda.engine.graphs import decode_shapes
from pagoda.interfaces.attention import AttentionMetadata
from pagoda.interfaces.model import ForwardContext

GRAPH_ARRAYS = ("input_ids", "positions", "slot_mapping", "query_start_loc", "seq_lens")  # a decode graph's, bar the tables
I64 = np.dtype(np.int64)


@dataclass(frozen=True)
class ChainRow:
    """One row of the chained steps: the draft's request after the round's first step."""

    start: int  # position of the token it computes in the first step
    steps: int  # steps it takes (0: padding in every step)
    blocks: list[int]  # its block table, covering positions up to start + steps - 1
    fed: tuple[int, ...] = ()  # the known tokens of its first steps; then (or from the first: seeded) drafts


@dataclass
class _Staged:
    """A round's step inputs on the device: per-step views and the shared block tables."""

    buffer: torch.Tensor  # [num_steps * step_bytes + table bytes] uint8
    steps: list[dict[str, torch.Tensor]]  # per step: GRAPH_ARRAYS views, and from_prev [size] int64 (1: feed a draft)
    block_tables: torch.Tensor  # [size, width] int32
    step_bytes: int  # per step, from_prev included
    graph_bytes: int  # per step, the part a decode graph reads
    max_seq_lens: list[int]  # per step, over its active rows (eager steps pass it to the backend)


class DraftChain:
    """Runs the chained one-token steps of draft rounds on a draft model's runner."""

    def __init__(self, runner) -> None:
        self.runner = runner  # pagoda.engine.model_runner.ModelRunner of the draft model

    def run(self, rows: list[ChainRow], seed: torch.Tensor | None = None) -> torch.Tensor:
        """Tokens ``[max steps, len(rows)]`` (on the device) sampled at each step; rows without
        ``fed`` tokens start from ``seed`` (``[len(rows)]``, their first drafts, on the device)."""
        if seed is None and any(not r.fed and r.steps for r in rows):
            raise ValueError("rows without fed tokens start from a seed: pass their first drafts")
        b, num_steps = len(rows), max((r.steps for r in rows), default=0)
        runner = self.runner
        with runner.platform.inference_context():
            tokens = torch.empty((num_steps, b), dtype=torch.long, device=runner.platform.device())
            if num_steps == 0:
                return tokens
            size, graphs = self._graph_size(rows)
            width = graphs.width if graphs is not None else max(max(len(r.blocks) for r in rows), 1)
            staged = self._stage(rows, num_steps, size, width)
            if graphs is not None:
                graphs.inputs[size]["block_tables"].copy_(staged.block_tables)
            prev = seed
            for j in range(num_steps):
                step = staged.steps[j]
                if prev is not None:  # rows that feed a draft: the known token is 0 there
                    step["input_ids"][:b].add_(prev * step["from_prev"][:b])
                hidden = self._forward(staged, j, size, graphs)  # [size, hidden]
                torch.argmax(runner.model.compute_logits(hidden[:b]), dim=-1, out=tokens[j])
                prev = tokens[j]
        return tokens

    def _graph_size(self, rows: list[ChainRow]):
        """(the captured size the steps replay at, the graphs), or (len(rows), None): eager."""
        graphs = self.runner.graphs
        if graphs is None or len(rows) > graphs.sizes[-1] or any(len(r.blocks) > graphs.width for r in rows):
            return len(rows), None
        return next(s for s in graphs.sizes if s >= len(rows)), graphs

    def _forward(self, staged: _Staged, j: int, size: int, graphs) -> torch.Tensor:
        runner, step = self.runner, staged.steps[j]
        if graphs is not None:
            start = j * staged.step_bytes
            graphs.buffer[: staged.graph_bytes].copy_(staged.buffer[start : start + staged.graph_bytes])
            return graphs.replay(size)
        metadata = AttentionMetadata(
            slot_mapping=step["slot_mapping"], block_tables=staged.block_tables, query_start_loc=step["query_start_loc"],
            seq_lens=step["seq_lens"], max_query_len=1, max_seq_len=staged.max_seq_lens[j], num_decodes=size,
        )
        context = ForwardContext(runner.attention.prepare(metadata), runner.kv_caches)
        return runner.model(step["input_ids"], step["positions"], context)

    def _stage(self, rows: list[ChainRow], num_steps: int, size: int, width: int) -> _Staged:
        """Every step's inputs, the first ``graph_bytes`` in the layout of a decode step padded to
        ``size`` (what a decode graph reads), then the block tables; one host buffer, one copy."""
        shapes = decode_shapes(size, width)
        offsets, _ = layout(shapes)
        graph_bytes = offsets["block_tables"]  # the step arrays come first, the block tables last
        step_shapes: Shapes = {**{name: shapes[name] for name in GRAPH_ARRAYS}, "from_prev": ((size,), I64)}
        offsets["from_prev"] = graph_bytes
        step_bytes = graph_bytes + layout({"from_prev": step_shapes["from_prev"]})[1]
        table_shapes: Shapes = {"block_tables": shapes["block_tables"]}
        host = self.runner.platform.host_buffer(num_steps * step_bytes + layout(table_shapes)[1])
        host.zero_()
        arrays = chain_arrays(rows, num_steps, size, self.runner.block_size)
        for j in range(num_steps):
            h = views(host[j * step_bytes : (j + 1) * step_bytes], step_shapes, offsets)
            for name in ("input_ids", "positions", "slot_mapping", "seq_lens", "from_prev"):
                h[name].numpy()[:] = arrays[name][j]
            h["query_start_loc"].numpy()[:] = np.arange(size + 1, dtype=np.int32)
        table = views(host[num_steps * step_bytes :], table_shapes, {"block_tables": 0})["block_tables"].numpy()
        for i, row in enumerate(rows):
            table[i, : len(row.blocks)] = row.blocks
        device = self.runner.platform.device()
        buffer = host if device.type == "cpu" else host.to(device, non_blocking=True)
        steps = [views(buffer[j * step_bytes : (j + 1) * step_bytes], step_shapes, offsets) for j in range(num_steps)]
        tables = views(buffer[num_steps * step_bytes :], table_shapes, {"block_tables": 0})["block_tables"]
        max_seq_lens = [int(m) for m in arrays["seq_lens"].max(axis=1)]
        return _Staged(buffer, steps, tables, step_bytes, graph_bytes, max_seq_lens)


def chain_arrays(rows: list[ChainRow], num_steps: int, size: int, block_size: int) -> dict[str, np.ndarray]:
    """Each step's known input tokens, positions, KV slots, whether a row feeds the previous
    step's token (``[num_steps, size]`` int64) and sequence lengths (int32); rows past their steps
    (and rows ``len(rows)..size``) are padding."""
    ids = np.zeros((num_steps, size), dtype=np.int64)
    from_prev = np.zeros((num_steps, size), dtype=np.int64)
    positions = np.zeros((num_steps, size), dtype=np.int64)
    slots = np.full((num_steps, size), -1, dtype=np.int64)
    for i, row in enumerate(rows):
        n, fed = min(row.steps, num_steps), min(len(row.fed), row.steps)
        pos = row.start + np.arange(n, dtype=np.int64)
        blocks = np.asarray(row.blocks, dtype=np.int64)
        ids[:fed, i] = row.fed[:fed]
        from_prev[fed:n, i] = 1
        positions[:n, i] = pos
        slots[:n, i] = blocks[pos // block_size] * block_size + pos % block_size
    return dict(input_ids=ids, from_prev=from_prev, positions=positions, slot_mapping=slots,
                seq_lens=(positions + 1).astype(np.int32))
