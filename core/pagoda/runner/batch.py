"""Turn a SchedulerOutput into the packed tensors one model step needs.

The integer inputs of a step (token ids, positions, KV slots, sequence lengths, block tables...)
are computed on the host with numpy, packed into one host buffer (pinned where the platform
can) and cross to the device in a single copy; the step's tensors are views of that one device
buffer. Decode steps that replay a captured graph take a shorter path (``DecodeGraphs.stage``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from pagoda.interfaces.attention import AttentionMetadata
from pagoda.interfaces.platform import Platform
from pagoda.interfaces.scheduler import SchedulerOutput

# Every array of the packed buffer starts at a multiple of 16 bytes: Triton specializes pointer
# arguments on 16-byte alignment, so with 8 (as before) the arrays after a variable-length one were
# aligned in some steps and not in others, and each new combination compiled a kernel variant in
# the middle of serving (~1 s steps, TTFT p99 0.8-1.2 s at 4-16 req/s; found with PAGODA_TRACE_DIR).
ALIGN = 16
TORCH_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32}
Shapes = dict[str, tuple[tuple[int, ...], np.dtype]]


@dataclass
class HostInputs:
    """One step's inputs as numpy arrays, in the order they are packed."""

    arrays: dict[str, np.ndarray]  # input_ids, positions, slot_mapping [T] int64; query_start_loc [S+1],
    #                                seq_lens [S], block_tables [S, W] int32; sample_token_index [K] int64
    num_decodes: int
    max_query_len: int
    max_seq_len: int
    sample_rows: list[int]  # indices into scheduled requests that sample this step
    query_starts: list[int]  # [S+1] host copy of query_start_loc


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # [num_tokens] int64
    positions: torch.Tensor  # [num_tokens] int64
    metadata: AttentionMetadata
    sample_rows: list[int]  # indices into scheduled requests that sample this step
    sample_token_index: torch.Tensor | None  # [num_sampling] last token of each sampling request; None: all tokens, in order
    query_starts: list[int]  # [num_seqs + 1] where each request's tokens start (host copy)
    graph_size: int | None = None  # the captured decode batch size these inputs are padded to
    graphs: object = None  # the graph set that replays them when not the decode graphs (verify graphs)
    multimodal: object = None  # a step feature's MultimodalEmbeddings for the forward pass (ForwardContext.multimodal)


def pack_host_inputs(out: SchedulerOutput, block_tables: list[list[int]], block_size: int) -> HostInputs:
    """The step's arrays (decodes first, by contract)."""
    counts = np.asarray(out.num_tokens, dtype=np.int64)  # [S]
    starts = np.fromiter((req.num_computed_tokens for req in out.requests), np.int64, len(counts))
    num_seqs, num_tokens = len(counts), int(counts.sum())
    table = np.zeros((num_seqs, max(1, max(len(t) for t in block_tables))), dtype=np.int32)
    for i, blocks in enumerate(block_tables):
        table[i, : len(blocks)] = blocks
    qsl = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(counts, out=qsl[1:])
    seq_lens = (starts + counts).astype(np.int32)
    seq_of_token = np.repeat(np.arange(num_seqs), counts)  # [T]
    positions = starts[seq_of_token] + np.arange(num_tokens) - qsl[seq_of_token]
    slots = table[seq_of_token, positions // block_size].astype(np.int64) * block_size + positions % block_size
    ids = np.fromiter(
        itertools.chain.from_iterable(req.token_ids[s : s + n] for req, s, n in zip(out.requests, starts.tolist(), out.num_tokens)),
        np.int64, num_tokens)
    sample_rows = [i for i, req in enumerate(out.requests)  # pooling requests are pooled, not sampled
                   if starts[i] + counts[i] == req.num_tokens and req.pooling_params is None]
    arrays = dict(input_ids=ids, positions=positions, slot_mapping=slots, query_start_loc=qsl.astype(np.int32),
                  seq_lens=seq_lens, block_tables=table)
    if len(sample_rows) != num_tokens:  # else every token samples, in order: no gather needed
        arrays["sample_token_index"] = qsl[1:][sample_rows] - 1
    return HostInputs(arrays, num_decodes=_count_leading_ones(out.num_tokens), max_query_len=int(counts.max()),
                      max_seq_len=int(seq_lens.max()), sample_rows=sample_rows, query_starts=qsl.tolist())


def layout(shapes: Shapes) -> tuple[dict[str, int], int]:
    """Byte offset of each array in the packed buffer, and the buffer's size."""
    offsets, size = {}, 0
    for name, (shape, dtype) in shapes.items():
        offsets[name] = size
        size += -(-math.prod(shape) * dtype.itemsize // ALIGN) * ALIGN
    return offsets, size


def views(buffer: torch.Tensor, shapes: Shapes, offsets: dict[str, int]) -> dict[str, torch.Tensor]:
    """Typed views of a byte buffer packed at ``offsets`` (from ``layout(shapes)``)."""
    out = {}
    for name, (shape, dtype) in shapes.items():
        end = offsets[name] + math.prod(shape) * dtype.itemsize
        out[name] = buffer[offsets[name] : end].view(TORCH_DTYPES[dtype]).view(shape)
    return out


def stage(host: HostInputs, platform: Platform) -> StepInputs:
    """Pack ``host`` into one host buffer and copy it to the device at once."""
    shapes = {name: (a.shape, a.dtype) for name, a in host.arrays.items()}
    offsets, size = layout(shapes)
    staging = platform.host_buffer(size)
    flat = staging.numpy()
    for name, a in host.arrays.items():
        flat[offsets[name] : offsets[name] + a.nbytes] = a.reshape(-1).view(np.uint8)
    device = platform.device()
    t = views(staging if device.type == "cpu" else staging.to(device, non_blocking=True), shapes, offsets)
    return step_inputs(t, host.max_query_len, host.max_seq_len, host.num_decodes, host.sample_rows, host.query_starts)


def step_inputs(t: dict[str, torch.Tensor], max_query_len: int, max_seq_len: int, num_decodes: int,
                sample_rows: list[int], query_starts: list[int], graph_size: int | None = None) -> StepInputs:
    """StepInputs over device tensors named as in HostInputs.arrays."""
    metadata = AttentionMetadata(
        slot_mapping=t["slot_mapping"], block_tables=t["block_tables"], query_start_loc=t["query_start_loc"],
        seq_lens=t["seq_lens"], max_query_len=max_query_len, max_seq_len=max_seq_len, num_decodes=num_decodes,
    )
    return StepInputs(t["input_ids"], t["positions"], metadata, sample_rows, t.get("sample_token_index"),
                      query_starts, graph_size)


def _count_leading_ones(values: list[int]) -> int:
    count = 0
    for v in values:
        if v != 1:
            break
        count += 1
    return count
