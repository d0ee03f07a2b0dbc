"""The csrc dense GEMV's configuration, chosen per weight shape by timing each on the device: the warps a
row group (split-K: 1, 2 or 4) and the weight rows a warp (1 or 2).

No fixed rule was right for every shape and device. On an H100 Llama-3.1-8B's o projection (4096 x 4096)
ran 14.8 -> 13.8 us with two rows a warp while its qkv (6144 x 4096) ran 19.7 -> 22.0; on an H200 four
warps a row were fastest for every projection of the 8B, two for the 1B's and one for the 1B's LM head
(measured when the tune was added; its gain today: docs/cuda.md). ``CsrcOps.tune`` times the six for every dense weight
shape of the loaded model, before the KV cache takes the free memory.

One or two rows a warp give the same sums bit for bit (each row keeps its own order over k); the split
does not (each warp sums its share of k, then the shares meet). So that timing noise seldom changes the
bits from one start to the next, the fewest warps a row whose time is within ``SPLIT_TOLERANCE`` of the
fastest win.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from pagoda.interfaces.parallel import TensorParallel

ROWS = (1, 2)  # weight rows a warp the kernel is built for
SPLITS = (1, 2, 4)  # warps a row group (split-K) the kernel is built for
SPLIT_TOLERANCE = 0.03  # more warps a row are taken only where they are faster by more than this share
STREAM_FACTOR = 4  # each timed graph streams at least this many L2 caches' worth of weights
MAX_LAUNCHES = 64  # GEMVs a timed graph runs at most
Shape = tuple[int, int, torch.dtype]  # (rows n, row length k, dtype) of a weight
Config = tuple[int, int]  # (warps a row group, weight rows a warp): the GEMV's split and rows arguments
Timer = Callable[[list[torch.Tensor]], dict[Config, float]]  # weights of one shape -> microseconds per config


def gemv_weights(model: nn.Module) -> dict[Shape, list[torch.Tensor]]:
    """The model's dense fp16/bf16 weights a one-token step multiplies through ``CustomOps.linear`` and the GEMV
    takes (contiguous, 16-byte aligned rows), by shape."""
    from pagoda.layers.csrc_ops import gemv_weight_fits
    from pagoda.layers.embedding import LMHead
    from pagoda.layers.linear import LinearBase
    from pagoda.quantization.unquantized import UnquantizedMethod

    shapes: dict[Shape, list[torch.Tensor]] = {}
    for module in model.modules():
        dense = isinstance(module, LMHead) or (
            isinstance(module, LinearBase) and isinstance(module.quant_method, UnquantizedMethod))
        weight = getattr(module, "weight", None) if dense else None
        if weight is not None and gemv_weight_fits(weight):
            shapes.setdefault((weight.shape[0], weight.shape[1], weight.dtype), []).append(weight)
    return shapes


def choose_configs(model: nn.Module, timer: Timer) -> dict[Shape, Config]:
    """The GEMV configuration for each dense weight shape of ``model``: the fewest warps a row within
    ``SPLIT_TOLERANCE`` of the fastest time, then the faster rows a warp (ties: one row)."""
    return {shape: fastest(timer(weights)) for shape, weights in gemv_weights(model).items()}


def fastest(times: dict[Config, float]) -> Config:
    """The configuration ``choose_configs`` takes from one shape's times."""
    limit = min(times.values()) * (1 + SPLIT_TOLERANCE)
    split = min(split for (split, _), us in times.items() if us <= limit)
    return min((config for config in times if config[0] == split), key=lambda config: (times[config], config[1]))


def slowest_rank(timer: Timer, tp: "TensorParallel") -> Timer:
    """``timer`` with each configuration's time the slowest of ``tp``'s ranks' (they time the same shapes in the
    same order), so that every rank chooses alike: a step waits for the slowest rank at each of its sums, and
    ranks timed apart chose differently (2 x H200, session 30: one rank's LM head on two rows a warp, 122 us,
    the other's on two warps a row, 118 us)."""

    def timed(weights: list[torch.Tensor]) -> dict[Config, float]:
        times = timer(weights)
        configs = sorted(times)
        return dict(zip(configs, tp.max_floats([times[config] for config in configs], weights[0].device)))

    return timed


def graph_timer(kernels: ModuleType, reps: int = 7) -> Timer:
    """A Timer on the GPU: one CUDA graph per configuration runs a one-token GEMV through the shape's weights
    in turn until ``STREAM_FACTOR`` L2 caches' worth streamed (as a step streams its cold weights); the
    graphs replay alternately ``reps`` times and each configuration's median time per GEMV counts."""

    def timer(weights: list[torch.Tensor]) -> dict[Config, float]:
        first = weights[0]
        l2_bytes = torch.cuda.get_device_properties(first.device).L2_cache_size
        launches = min(MAX_LAUNCHES, max(len(weights), -(-STREAM_FACTOR * l2_bytes // first.nbytes)))
        order = [weights[i % len(weights)] for i in range(launches)]
        x = torch.randn(1, first.shape[1], dtype=first.dtype, device=first.device)

        def run(config: Config) -> None:
            for w in order:
                kernels.dense_gemv(x, w, None, *config)

        graphs = {(split, rows): _captured(lambda c=(split, rows): run(c)) for split in SPLITS for rows in ROWS}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times: dict[Config, list[float]] = {config: [] for config in graphs}
        for _ in range(reps):
            for config, graph in graphs.items():
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times[config].append(start.elapsed_time(end) * 1e3 / launches)
        return {config: statistics.median(t) for config, t in times.items()}

    return timer


def _captured(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    fn()  # loads the kernels before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
