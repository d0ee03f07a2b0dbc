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

import torch
from tqdm.auto import tqdm

from pagoda.engine.batch import decode_shapes, layout, views
from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

logger = logging.getLogger("pagoda")
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeGraphs:
    def __init__(self, model: CausalLM, attention: AttentionBackend, platform: Platform,
                 kv_caches: list[torch.Tensor], block_size: int, max_model_len: int, max_num_seqs: int) -> None:
        self.model, self.attention, self.platform, self.kv_caches = model, attention, platform, kv_caches
        self.max_model_len = max_model_len
        self.sizes = [s for s in CAPTURE_SIZES if s <= max_num_seqs] or [1]
        self.width = -(-max_model_len // block_size)  # block-table columns, fixed for every replay
        # one static byte buffer; a step padded to ``size`` is packed into it in decode_shapes(size, width)
        _, nbytes = layout(decode_shapes(self.sizes[-1], self.width))
        self.buffer = torch.zeros(nbytes, dtype=torch.uint8, device=platform.device())
        # size -> (replay, static hidden output, the captured ForwardContext). The context must
        # live as long as the graph: a backend's prepare() may put device scratch in
        # metadata.extra that the recorded kernels write; freed, that memory would be handed to
        # other tensors and overwritten by every replay.
        self.graphs: dict[int, tuple] = {}
        self.inputs: dict[int, dict[str, torch.Tensor]] = {}  # size -> the views its graph recorded

    def capture(self) -> None:
        start = time.perf_counter()
        with self.platform.inference_context():
            for size in tqdm(self.sizes[::-1], desc="Capturing decode graphs", unit="graph", dynamic_ncols=True):
                t = self._padding_inputs(size)
                self.inputs[size] = t
                meta = AttentionMetadata(
                    slot_mapping=t["slot_mapping"], block_tables=t["block_tables"], query_start_loc=t["query_start_loc"],
                    seq_lens=t["seq_lens"], max_query_len=1, max_seq_len=self.max_model_len, num_decodes=size,
                )
                fwd = ForwardContext(self.attention.prepare(meta), self.kv_caches)
                run = lambda t=t, fwd=fwd: self.model(t["input_ids"], t["positions"], fwd)  # noqa: E731
                run()  # warm-up: kernel compilation and workspaces happen outside the capture
                self.platform.synchronize()
                replay, hidden = self.platform.capture_graph(run)
                self.graphs[size] = (replay, hidden, fwd)
        logger.info("Captured %d decode graphs (batch 1-%d) in %.1f s", len(self.graphs), self.sizes[-1],
                    time.perf_counter() - start)

    def size_for(self, out: SchedulerOutput) -> int | None:
        """The captured size a decode-only step of ``out`` replays at, or None (run it eagerly)."""
        b = len(out.requests)
        if b > self.sizes[-1] or any(n != 1 for n in out.num_tokens):
            return None
        if any(req.num_computed_tokens >= self.max_model_len for req in out.requests):
            return None
        return next(s for s in self.sizes if s >= b)

    def target(self, size: int) -> tuple[int, torch.Tensor, dict[str, torch.Tensor]]:
        """Where ``batch.stage`` puts a step replayed at ``size``."""
        return size, self.buffer, self.inputs[size]

    def replay(self, size: int) -> torch.Tensor:
        """Hidden states ``[size, hidden]`` of the step packed into ``buffer`` at ``size``."""
        replay, hidden, _ = self.graphs[size]
        replay()
        return hidden

    def _padding_inputs(self, size: int) -> dict[str, torch.Tensor]:
        """The views a graph of ``size`` records, filled as all-padding rows (slot -1, length 1)."""
        self.buffer.zero_()  # the layouts of all sizes overlap: clear what larger ones left
        t = views(self.buffer, decode_shapes(size, self.width))
        t["slot_mapping"].fill_(-1)
        t["seq_lens"].fill_(1)
        t["query_start_loc"].copy_(torch.arange(size + 1, dtype=torch.int32))
        return t
