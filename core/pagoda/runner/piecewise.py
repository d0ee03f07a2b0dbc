"""Prefill and mixed steps (the steps the decode graphs do not take) replayed as device graph pieces.

A step of at most ``--piecewise-graph-tokens`` tokens (default 512) is padded to the next captured token
count (:func:`piecewise_graph_sizes`). Everything but attention is recorded once per count as pieces cut
at each attention layer: the first runs from the embeddings to layer 0's q/k/v, the next from layer 0's
attention output to layer 1's q/k/v, and so on; the last ends with the final norm. Each piece copies its
q/k/v into static buffers. Between pieces the layer's attention runs eagerly on the step's real tokens
with the step's own metadata (so any mix of sequences replays), and its output is copied into the one
static buffer the next piece reads.

Why: eagerly, a step's host work (launching some 400 kernels of an 8B model) took 8-31 ms while the
device needed 6-10 ms for a short prompt beside a dozen decodes, so every decode in that step waited for
the host (an H100 serving trace at 8 requests/s, docs/performance.md). A replayed step costs the host
one launch per piece and the attention layers' own.

Padding rows compute on whatever ids and positions an earlier step left in the static inputs and are
dropped: every op outside attention works per row. (A dynamic per-tensor activation scale sees them, as
it sees a padded decode graph's rows.) A model that reads the attention layout outside its attention
layers (LongRoPE picks rotary rows by sequence length; MLA attends in its own layers) is not cut; its
steps run eagerly, as do steps with LoRA adapters or images.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from tqdm.auto import tqdm

from pagoda.interfaces.model import CausalLM, ForwardContext
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

logger = logging.getLogger("pagoda")


def piecewise_graph_sizes(limit: int) -> list[int]:
    """32..512 by 32, then by 64 to 1024, by 128 to 2048, by 256 beyond: past 256 tokens a step is
    padded by at most an eighth."""
    grid = [*range(32, 513, 32), *range(576, 1025, 64), *range(1152, 2049, 128), *range(2304, limit + 1, 256)]
    return [size for size in grid if size <= limit]


class NotCuttable(Exception):
    """The model cannot be recorded in pieces cut at its attention layers."""


class _NoLayout:
    """The metadata pieces are recorded with: one recording serves every step, so none may read it."""

    def __getattr__(self, name: str):
        raise NotCuttable(f"it reads the attention layout ({name}) outside its attention layers")


@dataclass
class Pieces:
    replays: list[Callable[[], None]]  # one per attention layer, each followed by that layer's attention, and the last
    hidden: torch.Tensor  # [size, hidden] the last piece's output


class PiecewiseGraphs:
    def __init__(self, model: CausalLM, platform: Platform, kv_caches: list[torch.Tensor], sizes: list[int]) -> None:
        self.model, self.platform, self.kv_caches, self.sizes = model, platform, kv_caches, sizes
        self.input_ids = torch.zeros(sizes[-1], dtype=torch.int64, device=platform.device())
        self.positions = torch.zeros_like(self.input_ids)
        self.static: dict[str, torch.Tensor] = {}  # q, k, v, out: [sizes[-1], width], made by the first split
        self.layers: list[nn.Module] = []  # the attention layers in the order the forward pass reaches them
        self.graphs: dict[int, Pieces] = {}

    def capture(self) -> bool:
        """Record every size (False, nothing recorded, where the model cannot be cut at attention)."""
        start = time.perf_counter()
        with self.platform.inference_context():
            try:
                for size in self.sizes[::-1]:  # kernels compile and workspaces grow outside the capture
                    self.layers = []
                    self._forward(size)
                if not self.layers:
                    raise NotCuttable("it has no attention layers that hand over their q/k/v")
            except NotCuttable as e:
                logger.info("Prefill and mixed steps run eagerly: the model cannot be cut at attention (%s)", e)
                return False
            self.platform.synchronize()
            try:
                for size in tqdm(self.sizes[::-1], desc="Capturing piecewise graphs", unit="graph", dynamic_ncols=True):
                    replays, hidden = self.platform.capture_graph_pieces(lambda cut, size=size: self._forward(size, cut))
                    assert len(replays) == len(self.layers) + 1, "the capture met other layers than the warm-up"
                    self.graphs[size] = Pieces(replays, hidden)
            except RuntimeError as e:  # e.g. a kernel that reads a value back to the host, which a graph cannot hold
                self.graphs.clear()
                logger.warning("Prefill and mixed steps run eagerly: recording them as graph pieces failed (%s); "
                               "--piecewise-graph-tokens 0 skips the attempt", e)
                return False
        logger.info("Captured piecewise graphs of prefill and mixed steps at %d token counts (%d-%d) in %.1f s",
                    len(self.graphs), self.sizes[0], self.sizes[-1], time.perf_counter() - start)
        return True

    def _forward(self, size: int, cut: Callable[[], None] | None = None) -> torch.Tensor:
        """The model at ``size`` tokens from the static inputs, split at attention: each layer's q/k/v
        go to the static buffers, then ``cut()`` (warm-up, no cut: the layer is listed), and the
        static output is what the layer returns."""
        def split(layer: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            for name, x in (("q", q), ("k", k), ("v", v)):
                self._buffer(name, x)[:size].copy_(x)
            if cut is None:
                self.layers.append(layer)
            else:
                cut()
            return self._buffer("out", q)[:size]

        fwd = ForwardContext(_NoLayout(), self.kv_caches, split=split)
        return self.model(self.input_ids[:size], self.positions[:size], fwd)

    def _buffer(self, name: str, like: torch.Tensor) -> torch.Tensor:
        buffer = self.static.get(name)
        if buffer is None:  # the warm-up's first split, outside any capture
            buffer = self.static[name] = torch.zeros(self.sizes[-1], like.shape[1], dtype=like.dtype, device=like.device)
        if buffer.shape[1:] != like.shape[1:] or buffer.dtype != like.dtype:
            raise NotCuttable(f"its attention layers differ in width ({name}: {list(buffer.shape[1:])} and "
                              f"{list(like.shape[1:])})")
        return buffer

    def size_for(self, out: SchedulerOutput) -> int | None:
        """The padded token count a step of ``out`` replays at, or None (run it eagerly): too many tokens,
        or a request with a LoRA adapter (the pieces were recorded without adapter rows)."""
        tokens = sum(out.num_tokens)
        if tokens > self.sizes[-1] or any(req.lora_request is not None for req in out.requests):
            return None
        return next(size for size in self.sizes if size >= tokens)

    def replay(self, input_ids: torch.Tensor, positions: torch.Tensor, size: int, fwd: ForwardContext) -> torch.Tensor:
        """Hidden states ``[num_tokens, hidden]`` of a step (``fwd``: its context, the metadata prepared by the
        backend), padded to ``size``."""
        n = input_ids.shape[0]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        pieces = self.graphs[size]
        q, k, v, out = (self.static[name][:n] for name in ("q", "k", "v", "out"))
        for replay, layer in zip(pieces.replays, self.layers):
            replay()
            out.copy_(layer.attend(q, k, v, fwd))
        pieces.replays[-1]()
        return pieces.hidden[:n]
