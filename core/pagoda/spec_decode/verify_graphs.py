"""Verify steps replayed as device graphs (CUDA graphs), captured at start-up next to the decode graphs.

A verify step runs ``1 + d`` query tokens for each request (``d`` drafts, at most ``k``; 0 for a
request that proposed none this step). For a graph every request gets ``q = k + 1`` query slots
and the batch is padded to a captured size, like decode graphs: request ``i`` owns tokens
``[i * q, (i + 1) * q)``, its real tokens first. Its sequence length is set to
``num_computed_tokens + q`` so that the attention backends place its real queries at their true
positions (a query's position is ``seq_len - q_len + offset``); the padding slots after them
write no KV (slot -1), sit at position 0 for the rotary tables, and their outputs are never read.
Real queries never see the padding (they are later in the causal order). Whole padding rows are
as in decode graphs: slot -1, block 0, length ``q``.

Launch shapes are static per size: ``size * q`` tokens, ``size`` sequences, no decodes,
``max_query_len = q``, ``max_seq_len = max_model_len`` (see ``runner/graphs.py``).
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from pagoda.runner.batch import Shapes, StepInputs, layout, step_inputs, views
from pagoda.runner.graphs import CAPTURE_SIZES
from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

logger = logging.getLogger("pagoda")
MAX_VERIFY_BATCH = 64  # larger verify steps run eagerly (they are far from launch-bound)


def verify_shapes(size: int, q: int, width: int) -> Shapes:
    """The packed layout of a verify step padded to ``size`` requests of ``q`` query slots."""
    i64, i32 = np.dtype(np.int64), np.dtype(np.int32)
    t = size * q
    return dict(input_ids=((t,), i64), positions=((t,), i64), slot_mapping=((t,), i64),
                query_start_loc=((size + 1,), i32), seq_lens=((size,), i32), block_tables=((size, width), i32))


class VerifyGraphs:
    def __init__(self, model: CausalLM, attention: AttentionBackend, platform: Platform, kv_caches: list[torch.Tensor],
                 block_size: int, query_len: int, max_model_len: int, max_num_seqs: int,
                 base_model_only: bool = False) -> None:
        self.model, self.attention, self.platform, self.kv_caches = model, attention, platform, kv_caches
        # LoRA enabled: the graphs hold no LoRA rows, so steps where a request has an adapter verify eagerly
        self.base_model_only = base_model_only
        self.block_size, self.q, self.max_model_len = block_size, query_len, max_model_len
        self.sizes = [s for s in CAPTURE_SIZES if s <= min(max_num_seqs, MAX_VERIFY_BATCH)] or [1]
        self.width = -(-max_model_len // block_size)
        _, nbytes = layout(verify_shapes(self.sizes[-1], self.q, self.width))
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8, device=platform.device())
        self.mirror = platform.host_buffer(nbytes)  # steps with drafts are read before the next one is staged
        self.mirror.zero_()
        self._host: dict[int, dict[str, np.ndarray]] = {}
        self._nbytes: dict[int, int] = {}
        self.graphs: dict[int, tuple] = {}  # size -> (replay, static hidden, the captured ForwardContext)
        self.inputs: dict[int, dict[str, torch.Tensor]] = {}

    def capture(self) -> None:
        start = time.perf_counter()
        with self.platform.inference_context():
            for size in self.sizes[::-1]:
                t = self.inputs[size] = self._padding_inputs(size)
                meta = AttentionMetadata(
                    slot_mapping=t["slot_mapping"], block_tables=t["block_tables"], query_start_loc=t["query_start_loc"],
                    seq_lens=t["seq_lens"], max_query_len=self.q, max_seq_len=self.max_model_len, num_decodes=0,
                )
                fwd = ForwardContext(self.attention.prepare(meta), self.kv_caches)
                run = lambda t=t, fwd=fwd: self.model(t["input_ids"], t["positions"], fwd)  # noqa: E731
                run()  # warm-up outside the capture
                self.platform.synchronize()
                replay, hidden = self.platform.capture_graph(run)
                self.graphs[size] = (replay, hidden, fwd)
        logger.info("Captured %d verify graphs (batch 1-%d, %d query tokens each) in %.1f s", len(self.graphs),
                    self.sizes[-1], self.q, time.perf_counter() - start)

    def size_for(self, out: SchedulerOutput) -> int | None:
        """The captured size for a step where every request computes its last token plus its drafts
        (at most ``q`` tokens, within the context) and some request has drafts; else None."""
        b = len(out.requests)
        if b > self.sizes[-1] or not any(req.num_draft_tokens for req in out.requests):
            return None
        if self.base_model_only and any(req.lora_request is not None for req in out.requests):
            return None
        for req, n in zip(out.requests, out.num_tokens):
            if n != 1 + req.num_draft_tokens or req.num_computed_tokens + n != req.num_tokens:
                return None
            if req.num_computed_tokens + self.q > self.max_model_len:
                return None
        return next(s for s in self.sizes if s >= b)

    def stage(self, out: SchedulerOutput, block_tables: list[list[int]], size: int) -> StepInputs:
        """Write the step padded to ``size`` x ``q`` into the host mirror and copy it over at once."""
        b, q, bs = len(out.requests), self.q, self.block_size
        h = self._host_views(size)
        starts = [req.num_computed_tokens for req in out.requests]
        h["input_ids"][:] = 0
        h["positions"][:] = 0
        h["slot_mapping"][:] = -1
        for i, (req, n, blocks) in enumerate(zip(out.requests, out.num_tokens, block_tables)):
            pos = np.arange(starts[i], starts[i] + n)
            lo = i * q
            h["input_ids"][lo : lo + n] = req.token_ids[starts[i] : starts[i] + n]
            h["positions"][lo : lo + n] = pos
            h["slot_mapping"][lo : lo + n] = np.asarray(blocks, dtype=np.int64)[pos // bs] * bs + pos % bs
            h["block_tables"][i, : len(blocks)] = blocks
            h["block_tables"][i, len(blocks) : -(-(starts[i] + q) // bs)] = 0  # padding queries read these
        h["seq_lens"][:b] = [s + q for s in starts]
        h["seq_lens"][b:] = q
        h["block_tables"][b:, : -(-q // bs)] = 0
        h["query_start_loc"][:] = np.arange(0, (size + 1) * q, q, dtype=np.int32)
        nbytes = self._nbytes[size]
        self.buffer[:nbytes].copy_(self.mirror[:nbytes], non_blocking=True)
        inputs = step_inputs(self.inputs[size], q, self.max_model_len, 0, list(range(b)),
                             list(range(0, (b + 1) * q, q)), size)
        inputs.graphs = self
        return inputs

    def replay(self, size: int) -> torch.Tensor:
        """Hidden states ``[size * q, hidden]`` of the step staged at ``size``."""
        replay, hidden, _ = self.graphs[size]
        replay()
        return hidden

    def _host_views(self, size: int) -> dict[str, np.ndarray]:
        if size not in self._host:
            shapes = verify_shapes(size, self.q, self.width)
            offsets, self._nbytes[size] = layout(shapes)
            self._host[size] = {k: v.numpy() for k, v in views(self.mirror, shapes, offsets).items()}
        return self._host[size]

    def _padding_inputs(self, size: int) -> dict[str, torch.Tensor]:
        """The views a graph of ``size`` records, filled as all-padding rows."""
        self.buffer.zero_()
        shapes = verify_shapes(size, self.q, self.width)
        t = views(self.buffer, shapes, layout(shapes)[0])
        t["slot_mapping"].fill_(-1)
        t["seq_lens"].fill_(self.q)
        t["query_start_loc"].copy_(torch.arange(0, (size + 1) * self.q, self.q, dtype=torch.int32))
        return t
