"""Steps the decode graphs do not take (prefill chunks, prefill + decodes) replayed as graph pieces.

``PAGODA_MIXED_GRAPHS=N`` (off: measured without gain, see below): a step that neither the decode nor
the verify graphs take and has at most N tokens is padded to the next captured token count
(:func:`mixed_graph_sizes`). Everything but attention is recorded once per count as pieces cut at
each attention layer: the first runs from the embeddings to layer 0's q/k/v, the next from layer 0's
attention output to layer 1's q/k/v, and so on; the last ends with the final norm. Each piece copies
its q/k/v into static buffers. Between pieces the layer's attention runs eagerly on the step's real
tokens with the step's own metadata (so any mix of sequences replays), and its output is copied into
the one static buffer the next piece reads.

Padding rows compute on whatever ids and positions an earlier step left in the static inputs and are
dropped: every op outside attention works per row. (A dynamic per-tensor activation scale sees them,
as it sees a padded decode graph's rows.) A model that reads the attention layout outside its
attention layers (LongRoPE picks rotary rows by sequence length) is not cut; its steps run eagerly.

Why it was built: eager steps of 256-300 tokens on Llama-3.1-8B returned to the host only after
13-16 ms (H100 serving trace, 2026-11-28), and each new token count cost about 1 ms more the first time
(scripts/device/first_shapes.py). Measured (docs/performance.md, "Where the served tail goes"): the step
is bound by its GEMMs on the device, not by launching them. Served at 16 req/s, ITL p99 was 16.9 ms with
pieces against 17.5 ms without; timed alone, a mixed step was no faster.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from pagoda.errors import ConfigError
from pagoda.interfaces.attention import AttentionMetadata
from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput
from pagoda.layers.attention import Attention

logger = logging.getLogger("pagoda")
ENV = "PAGODA_MIXED_GRAPHS"


def mixed_graph_limit() -> int:
    """The most tokens a step replayed in pieces may have (``PAGODA_MIXED_GRAPHS``; 0: none)."""
    value = os.environ.get(ENV, "0")
    if not value.isdigit():
        raise ConfigError(f"{ENV}={value!r}: set the most tokens a step replayed as graph pieces may have "
                          "(e.g. 2048), or 0 to run such steps eagerly")
    return int(value)


def mixed_graph_sizes(limit: int) -> list[int]:
    """32..512 by 32, then by 64 to 1024, by 128 to 2048, by 256 beyond: past 256 tokens a step is
    padded by at most an eighth."""
    grid = [*range(32, 513, 32), *range(576, 1025, 64), *range(1152, 2049, 128), *range(2304, limit + 1, 256)]
    return [size for size in grid if size <= limit]


class NotCuttable(Exception):
    """The model cannot be recorded in pieces cut at its attention layers."""


class _NoLayout:
    """The metadata pieces are recorded with: one layout serves every step, so none may be read."""

    def __getattr__(self, name: str):
        raise NotCuttable(f"it reads the attention layout ({name}) outside its attention layers")


@dataclass
class Pieces:
    replays: list[Callable[[], None]]  # one per attention layer, each followed by that layer's attention, and the last
    hidden: torch.Tensor  # [size, hidden] the last piece's output


class MixedGraphs:
    def __init__(self, model: CausalLM, platform: Platform, kv_caches: list[torch.Tensor], sizes: list[int]) -> None:
        self.model, self.platform, self.kv_caches, self.sizes = model, platform, kv_caches, sizes
        self.input_ids = torch.zeros(sizes[-1], dtype=torch.int64, device=platform.device())
        self.positions = torch.zeros_like(self.input_ids)
        self.static: dict[str, torch.Tensor] = {}  # q, k, v, out: [sizes[-1], width], made by the first split
        self.layers: list[Attention] = []  # the attention layers in the order the forward pass reaches them
        self.graphs: dict[int, Pieces] = {}

    def capture(self) -> bool:
        """Record every size (False, nothing recorded, where the model reads the layout outside attention)."""
        start = time.perf_counter()
        with self.platform.inference_context():
            try:
                for size in self.sizes[::-1]:  # kernels compile and workspaces grow outside the capture
                    self.layers = []
                    self._forward(size)
            except NotCuttable as e:
                logger.info("Prefill and mixed steps run eagerly: the model cannot be cut at attention (%s)", e)
                return False
            self.platform.synchronize()
            for size in tqdm(self.sizes[::-1], desc="Capturing mixed-step graphs", unit="graph", dynamic_ncols=True):
                replays, hidden = self.platform.capture_graph_pieces(lambda cut, size=size: self._forward(size, cut))
                assert len(replays) == len(self.layers) + 1, "the capture met other layers than the warm-up"
                self.graphs[size] = Pieces(replays, hidden)
        logger.info("Captured piecewise graphs of prefill and mixed steps at %d token counts (%d-%d) in %.1f s",
                    len(self.graphs), self.sizes[0], self.sizes[-1], time.perf_counter() - start)
        return True

    def _forward(self, size: int, cut: Callable[[], None] | None = None) -> torch.Tensor:
        """The model at ``size`` tokens from the static inputs, split at attention: each layer's q/k/v
        go to the static buffers, then ``cut()`` (warm-up, no cut: the layer is listed), and the
        static output is what the layer returns."""
        def split(layer: Attention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            for name, x in (("q", q), ("k", k), ("v", v)):
                self._buffer(name, x)[:size].copy_(x)
            if cut is None:
                self.layers.append(layer)
            else:
                cut()
            return self._buffer("out", q)[:size]

        return self.model(self.input_ids[:size], self.positions[:size], ForwardContext(_NoLayout(), self.kv_caches,
                                                                                       split=split))

    def _buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        buffer = self.static.get(name)
        if buffer is None:  # the warm-up's first split, outside any capture
            buffer = self.static[name] = torch.zeros(self.sizes[-1], like.shape[1], dtype=like.dtype, device=like.device)
        if buffer.shape[1:] != like.shape[1:] or buffer.dtype != like.dtype:
            raise NotCuttable(f"its attention layers differ in width ({name}: {list(buffer.shape[1:])} and "
                              f"{list(like.shape[1:])})")
        return buffer

    def size_for(self, out: SchedulerOutput) -> int | None:
        """The padded token count a step of ``out`` replays at, or None (run it eagerly)."""
        tokens = sum(out.num_tokens)
        return next((size for size in self.sizes if size >= tokens), None)

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor, size: int, metadata: AttentionMetadata) -> torch.Tensor:
        """Hidden states ``[num_tokens, hidden]`` of a step (``metadata`` prepared by the backend)."""
        n = input_ids.shape[0]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        pieces, fwd = self.graphs[size], ForwardContext(metadata, self.kv_caches)
        q, k, v, out = (self.static[name][:n] for name in ("q", "k", "v", "out"))
        for replay, layer in zip(pieces.replays, self.layers):
            replay()
            out.copy_(layer.attend(q, k, v, fwd))
        pieces.replays[-1]()
        return pieces.hidden[:n]
