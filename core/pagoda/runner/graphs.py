"""Decode steps replayed as device graphs (CUDA graphs), captured once at start-up.

A decode-only step of ``b`` sequences is padded to the smallest captured size ``>= b``: its
inputs are packed in that size's layout and copied into the static buffer (one copy, see
``batch.stage``), the recorded forward is replayed, and the first ``b`` rows of the static
output are read. Padding rows write no KV (slot -1) and attend over one
token of block 0. What a backend's kernels size their launch by must be static for a captured
size: token count, ``num_decodes``, the block-table width (``max_model_len / block_size``) and
``max_seq_len`` (``max_model_len``, an upper bound), which ``AttentionBackend.prepare`` sees.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch
from tqdm.auto import tqdm

from pagoda.config import EngineConfig
from pagoda.runner.batch import Shapes, StepInputs, layout, step_inputs, views
from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext, IntermediateTensors
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

logger = logging.getLogger("pagoda")
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


def decode_shapes(size: int, width: int) -> Shapes:
    """The packed layout of a decode step padded to ``size`` rows (what a graph of that size reads)."""
    i64, i32 = np.dtype(np.int64), np.dtype(np.int32)
    return dict(input_ids=((size,), i64), positions=((size,), i64), slot_mapping=((size,), i64),
                query_start_loc=((size + 1,), i32), seq_lens=((size,), i32), block_tables=((size, width), i32))


class DecodeGraphs:
    def __init__(self, model: CausalLM, attention: AttentionBackend, platform: Platform,
                 kv_caches: list[torch.Tensor], block_size: int, max_model_len: int, max_num_seqs: int,
                 link=None) -> None:
        self.model, self.attention, self.platform, self.kv_caches = model, attention, platform, kv_caches
        self.block_size, self.max_model_len = block_size, max_model_len
        self.sizes = [s for s in CAPTURE_SIZES if s <= max_num_seqs] or [1]
        # a pipeline stage after the first (``link``: its runner.pipeline.StageLink) starts from the activations
        # the stage before sent: received into these static rows before a replay
        self.intermediate = link.buffers(self.sizes[-1]) if link is not None else None
        self.width = -(-max_model_len // block_size)  # block-table columns, fixed for every replay
        # One static device buffer and two host mirrors (pinned where the platform can), used in
        # turn: a step padded to ``size`` is written into a mirror in decode_shapes(size, width)
        # and copied over at once. With overlapped steps the next step is staged before the
        # previous one has run, but never before the engine read the tokens of the one before
        # that: so the mirror written now was last read by a copy that has finished.
        _, nbytes = layout(decode_shapes(self.sizes[-1], self.width))
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8, device=platform.device())
        self.mirrors = [platform.host_buffer(nbytes) for _ in range(2)]
        for mirror in self.mirrors:
            mirror.zero_()
        self._turn = 0
        self._host: dict[tuple[int, int], dict[str, np.ndarray]] = {}  # (mirror, size) -> numpy views
        self._nbytes: dict[int, int] = {}
        self._arange = np.arange(self.sizes[-1] + 1, dtype=np.int32)
        # size -> (replay, static hidden output, the captured ForwardContext). The context must
        # live as long as the graph: a backend's prepare() may put device scratch in
        # metadata.extra that the recorded kernels write; freed, that memory would be handed to
        # other tensors and overwritten by every replay.
        self.graphs: dict[int, tuple] = {}
        self.inputs: dict[int, dict[str, torch.Tensor]] = {}  # size -> the device views its graph recorded

    def capture(self) -> None:
        start = time.perf_counter()
        with self.platform.inference_context():
            for size in tqdm(self.sizes[::-1], desc="Capturing decode graphs", unit="graph", dynamic_ncols=True):
                t = self.inputs[size] = self._padding_inputs(size)
                meta = AttentionMetadata(
                    slot_mapping=t["slot_mapping"], block_tables=t["block_tables"], query_start_loc=t["query_start_loc"],
                    seq_lens=t["seq_lens"], max_query_len=1, max_seq_len=self.max_model_len, num_decodes=size,
                )
                fwd = ForwardContext(self.attention.prepare(meta), self.kv_caches,
                                     intermediate=self.intermediate_inputs(size))
                run = lambda t=t, fwd=fwd: self.model(t["input_ids"], t["positions"], fwd)  # noqa: E731
                run()  # warm-up: kernel compilation and workspaces happen outside the capture
                self.platform.synchronize()
                replay, hidden = self.platform.capture_graph(run)
                self.graphs[size] = (replay, hidden, fwd)
        logger.info("Captured %d decode graphs (batch 1-%d) in %.1f s", len(self.graphs), self.sizes[-1],
                    time.perf_counter() - start)

    def size_for(self, out: SchedulerOutput) -> int | None:
        """The captured size a step of ``out`` replays at, or None (run it eagerly): it must be
        all decodes (one new token each, after all earlier ones) within the captured sizes."""
        b = len(out.requests)
        if b > self.sizes[-1] or any(n != 1 for n in out.num_tokens):
            return None
        if any(req.num_computed_tokens + 1 != req.num_tokens or req.num_tokens > self.max_model_len for req in out.requests):
            return None
        return next(s for s in self.sizes if s >= b)

    def stage(self, out: SchedulerOutput, block_tables: list[list[int]], size: int) -> StepInputs:
        """Write a decode step padded to ``size`` into the host mirror and copy it over at once.

        Block-table entries past a row's length are left as they are (kernels never read them);
        padding rows get block 0 at column 0, the one entry they read (without writing: slot -1).
        """
        b, bs = len(out.requests), self.block_size
        mirror, self._turn = self._turn, 1 - self._turn
        h = self._host_views(mirror, size)
        pos = [req.num_computed_tokens for req in out.requests]
        h["input_ids"][:b] = [req.token_ids[-1] for req in out.requests]
        h["positions"][:b] = pos
        h["slot_mapping"][:b] = [t[p // bs] * bs + p % bs for t, p in zip(block_tables, pos)]
        h["seq_lens"][:b] = [p + 1 for p in pos]
        for i, blocks in enumerate(block_tables):
            h["block_tables"][i, : len(blocks)] = blocks
        h["input_ids"][b:], h["positions"][b:], h["slot_mapping"][b:], h["seq_lens"][b:] = 0, 0, -1, 1
        h["block_tables"][b:, 0] = 0  # (real rows' input ids may be placeholders, -1, until filled on the device)
        h["query_start_loc"][:] = self._arange[: size + 1]
        nbytes = self._nbytes[size]
        self.buffer[:nbytes].copy_(self.mirrors[mirror][:nbytes], non_blocking=True)
        return step_inputs(self.inputs[size], 1, max(pos) + 1, size, list(range(b)), list(range(b + 1)), size)

    def _host_views(self, mirror: int, size: int) -> dict[str, np.ndarray]:
        if (mirror, size) not in self._host:
            shapes = decode_shapes(size, self.width)
            offsets, self._nbytes[size] = layout(shapes)
            self._host[mirror, size] = {k: v.numpy() for k, v in views(self.mirrors[mirror], shapes, offsets).items()}
        return self._host[mirror, size]

    def intermediate_inputs(self, size: int) -> IntermediateTensors | None:
        """The static activations a graph of ``size`` starts from (a pipeline stage after the first), or None."""
        if self.intermediate is None:
            return None
        return IntermediateTensors(self.intermediate.hidden[:size], self.intermediate.residual[:size])

    def replay(self, size: int) -> torch.Tensor:
        """Hidden states ``[size, hidden]`` of the step staged at ``size``."""
        replay, hidden, _ = self.graphs[size]
        replay()
        return hidden

    def _padding_inputs(self, size: int) -> dict[str, torch.Tensor]:
        """The views a graph of ``size`` records, filled as all-padding rows (slot -1, length 1)."""
        self.buffer.zero_()  # the layouts of all sizes overlap: clear what larger ones left
        shapes = decode_shapes(size, self.width)
        t = views(self.buffer, shapes, layout(shapes)[0])
        t["slot_mapping"].fill_(-1)
        t["seq_lens"].fill_(1)
        t["query_start_loc"].copy_(torch.arange(size + 1, dtype=torch.int32))
        return t


def use_graphs(config: EngineConfig, platform: Platform, attention: AttentionBackend) -> bool:
    """Device graphs for decode steps, unless --enforce-eager or the backend/platform cannot."""
    if config.enforce_eager or not platform.supports_graphs() or config.runner == "pooling":
        return False  # pooling steps are whole prompts, never the decode steps graphs capture
    if not attention.supports_graphs:
        logger.info("Attention backend %s cannot be captured in device graphs: decode runs eagerly",
                    type(attention).__name__)
        return False
    return True
