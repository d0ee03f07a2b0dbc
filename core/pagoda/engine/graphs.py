"""Decode steps replayed as device graphs (CUDA graphs), captured once at start-up.

A decode-only step of ``b`` sequences is padded to the smallest captured size ``>= b``: its
inputs are copied into static buffers, the recorded forward is replayed, and the first ``b``
rows of the static output are read. Padding rows write no KV (slot -1) and attend over one
token of block 0. What a backend's kernels size their launch by must be static for a captured
size: token count, ``num_decodes``, the block-table width (``max_model_len / block_size``) and
``max_seq_len`` (``max_model_len``, an upper bound), which ``AttentionBackend.prepare`` sees.
"""

from __future__ import annotations

import logging
import time

import torch
from tqdm.auto import tqdm

from pagoda.engine.batch import StepInputs
from pagoda.interfaces.attention import AttentionBackend, AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform

logger = logging.getLogger("pagoda")
CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512)


class DecodeGraphs:
    def __init__(self, model: CausalLM, attention: AttentionBackend, platform: Platform,
                 kv_caches: list[torch.Tensor], block_size: int, max_model_len: int, max_num_seqs: int) -> None:
        self.model, self.attention, self.platform, self.kv_caches = model, attention, platform, kv_caches
        self.max_model_len = max_model_len
        self.sizes = [s for s in CAPTURE_SIZES if s <= max_num_seqs] or [1]
        n, width, device = self.sizes[-1], -(-max_model_len // block_size), platform.device()
        self.input_ids = torch.zeros(n, dtype=torch.int64, device=device)
        self.positions = torch.zeros(n, dtype=torch.int64, device=device)
        self.slot_mapping = torch.full((n,), -1, dtype=torch.int64, device=device)
        self.block_tables = torch.zeros(n, width, dtype=torch.int32, device=device)
        self.seq_lens = torch.ones(n, dtype=torch.int32, device=device)
        self.query_start_loc = torch.arange(n + 1, dtype=torch.int32, device=device)
        # size -> (replay, static hidden output, the captured ForwardContext). The context must
        # live as long as the graph: a backend's prepare() may put device scratch in
        # metadata.extra that the recorded kernels write; freed, that memory would be handed to
        # other tensors and overwritten by every replay.
        self.graphs: dict[int, tuple] = {}

    def capture(self) -> None:
        start = time.perf_counter()
        with self.platform.inference_context():
            for size in tqdm(self.sizes[::-1], desc="Capturing decode graphs", unit="graph", dynamic_ncols=True):
                fwd = ForwardContext(self.attention.prepare(self._metadata(size)), self.kv_caches)
                run = lambda size=size, fwd=fwd: self.model(self.input_ids[:size], self.positions[:size], fwd)  # noqa: E731
                run()  # warm-up: kernel compilation and workspaces happen outside the capture
                self.platform.synchronize()
                replay, hidden = self.platform.capture_graph(run)
                self.graphs[size] = (replay, hidden, fwd)
        logger.info("Captured %d decode graphs (batch 1-%d) in %.1f s", len(self.graphs), self.sizes[-1],
                    time.perf_counter() - start)

    def can_run(self, inputs: StepInputs) -> bool:
        meta = inputs.metadata
        num_tokens = inputs.input_ids.shape[0]
        return meta.num_decodes == meta.num_seqs == num_tokens <= self.sizes[-1] and meta.max_seq_len <= self.max_model_len

    def run(self, inputs: StepInputs) -> torch.Tensor:
        """Hidden states ``[b, hidden]`` of a decode-only step, by replaying a captured graph."""
        b = inputs.input_ids.shape[0]
        size = next(s for s in self.sizes if s >= b)
        meta = inputs.metadata
        self.input_ids[:b].copy_(inputs.input_ids)
        self.positions[:b].copy_(inputs.positions)
        self.slot_mapping[:b].copy_(meta.slot_mapping)
        self.slot_mapping[b:size].fill_(-1)
        self.seq_lens[:b].copy_(meta.seq_lens)
        self.seq_lens[b:size].fill_(1)
        self.block_tables[:b, : meta.block_tables.shape[1]].copy_(meta.block_tables)
        self.block_tables[b:size].zero_()
        replay, hidden, _ = self.graphs[size]
        replay()
        return hidden[:b]

    def _metadata(self, size: int) -> AttentionMetadata:
        return AttentionMetadata(
            slot_mapping=self.slot_mapping[:size], block_tables=self.block_tables[:size],
            query_start_loc=self.query_start_loc[: size + 1], seq_lens=self.seq_lens[:size],
            max_query_len=1, max_seq_len=self.max_model_len, num_decodes=size,
        )
