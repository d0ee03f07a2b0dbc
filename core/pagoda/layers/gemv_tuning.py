"""Weight rows a warp for the csrc dense GEMV, chosen per weight shape by timing both on the device.

One or two rows a warp give the same sums bit for bit (each row keeps its own order over k), so the
choice only moves the speed, and no fixed rule was right for every shape: on an H100 (2026-11-27,
benchmarks/results/h100x2_2026-11-27_round20/) Llama-3.1-8B's o projection (4096 x 4096) ran 14.8 ->
13.8 us with two rows a warp while its qkv (6144 x 4096) ran 19.7 -> 22.0. ``CsrcOps.tune`` times both
for every dense weight shape of the loaded model, before the KV cache takes the free memory.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from types import ModuleType

import torch
from torch import nn

ROWS = (1, 2)  # weight rows a warp the kernel is built for
STREAM_FACTOR = 4  # each timed graph streams at least this many L2 caches' worth of weights
MAX_LAUNCHES = 64  # GEMVs a timed graph runs at most
Shape = tuple[int, int, torch.dtype]  # (rows n, row length k, dtype) of a weight
Timer = Callable[[list[torch.Tensor]], dict[int, float]]  # weights of one shape -> microseconds per rows choice


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


ROWS_BY_SHAPE_ENV = "PAGODA_GEMV_ROWS_BY_SHAPE"


def forced_rows(value: str | None) -> dict[tuple[int, int], int]:
    """Rows a warp forced per weight shape, from ``PAGODA_GEMV_ROWS_BY_SHAPE`` (``NxK:ROWS,...``, e.g.
    ``4096x7168:1``: weights of n rows of k, whatever the tuning chose); an error naming the variable and
    the format for anything else."""
    forced = {}
    for item in filter(None, (part.strip() for part in (value or "").split(","))):
        shape, _, rows = item.partition(":")
        n, _, k = shape.partition("x")
        if not (n.isdigit() and k.isdigit() and rows in ("1", "2")):
            raise ValueError(f"{ROWS_BY_SHAPE_ENV}: {item!r} is not NxK:ROWS with ROWS 1 or 2 (e.g. 4096x7168:1)")
        forced[(int(n), int(k))] = int(rows)
    return forced


def choose_rows(model: nn.Module, timer: Timer) -> dict[Shape, int]:
    """The faster rows-a-warp choice for each dense weight shape of ``model`` (ties: one row)."""
    chosen = {}
    for shape, weights in gemv_weights(model).items():
        times = timer(weights)
        chosen[shape] = min(ROWS, key=lambda rows: (times[rows], rows))
    return chosen


def graph_timer(kernels: ModuleType, reps: int = 7) -> Timer:
    """A Timer on the GPU: one CUDA graph per choice runs a one-token GEMV through the shape's weights in
    turn until ``STREAM_FACTOR`` L2 caches' worth streamed (as a step streams its cold weights); the
    graphs replay alternately ``reps`` times and each choice's median time per GEMV counts."""

    def timer(weights: list[torch.Tensor]) -> dict[int, float]:
        first = weights[0]
        l2_bytes = torch.cuda.get_device_properties(first.device).L2_cache_size
        launches = min(MAX_LAUNCHES, max(len(weights), -(-STREAM_FACTOR * l2_bytes // first.nbytes)))
        order = [weights[i % len(weights)] for i in range(launches)]
        x = torch.randn(1, first.shape[1], dtype=first.dtype, device=first.device)
        graphs = {rows: _captured(lambda rows=rows: [kernels.dense_gemv(x, w, None, 0, rows) for w in order])
                  for rows in ROWS}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times: dict[int, list[float]] = {rows: [] for rows in ROWS}
        for _ in range(reps):
            for rows, graph in graphs.items():
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                times[rows].append(start.elapsed_time(end) * 1e3 / launches)
        return {rows: statistics.median(t) for rows, t in times.items()}

    return timer


def _captured(fn: Callable[[], object]) -> torch.cuda.CUDAGraph:
    fn()  # loads the kernels before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
