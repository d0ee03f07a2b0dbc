"""The packed step inputs keep every array 16-byte aligned, whatever the batch: Triton specializes
pointer arguments on 16-byte alignment, so a misaligned array would compile kernel variants
mid-serving."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pagoda.runner.batch import layout, views


@pytest.mark.parametrize("num_tokens,num_seqs,width", [(1, 1, 1), (7, 3, 5), (299, 44, 3), (530, 20, 33)])
def test_every_packed_array_is_16_byte_aligned(num_tokens, num_seqs, width):
    i64, i32 = np.dtype(np.int64), np.dtype(np.int32)
    shapes = {"input_ids": ((num_tokens,), i64), "positions": ((num_tokens,), i64),
              "slot_mapping": ((num_tokens,), i64), "query_start_loc": ((num_seqs + 1,), i32),
              "seq_lens": ((num_seqs,), i32), "block_tables": ((num_seqs, width), i32),
              "sample_token_index": ((num_seqs,), i64)}
    offsets, size = layout(shapes)
    buffer = torch.empty(size, dtype=torch.uint8)
    assert buffer.data_ptr() % 16 == 0
    tensors = views(buffer, shapes, offsets)
    assert {name: t.data_ptr() % 16 for name, t in tensors.items()} == dict.fromkeys(shapes, 0)
    assert [tuple(t.shape) for t in tensors.values()] == [s for s, _ in shapes.values()]
