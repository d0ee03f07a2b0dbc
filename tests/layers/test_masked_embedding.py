"""CustomOps.masked_embedding (the torch reference and CPU path of a vocab-parallel rank's lookup) against
rows picked one by one in a Python loop: ids below, at both edges of, inside and above the rank's rows,
int32 and int64 ids, float dtypes; and VocabEmbedding at TP=2 computing through its ops."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

from pagoda.interfaces.parallel import TensorParallel
from pagoda.layers.embedding import VocabEmbedding
from pagoda.interfaces.ops import CustomOps

START, ROWS, HIDDEN = 100, 37, 12
IDS = [0, 5, START - 1, START, START + 1, START + 18, START + ROWS - 1, START + ROWS, START + ROWS + 1, 10**6, START]


def expected_rows(ids: list[int], weight: torch.Tensor, start: int) -> torch.Tensor:
    out = torch.zeros(len(ids), weight.shape[1], dtype=weight.dtype)
    for t, token in enumerate(ids):
        if start <= token < start + weight.shape[0]:
            out[t] = weight[token - start]
    return out


@pytest.mark.parametrize("id_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_reference_keeps_its_rows_and_zeroes_the_others(id_dtype, dtype):
    weight = (torch.randn(ROWS, HIDDEN) + 2).to(dtype)  # no zero entries: a wrongly zeroed row shows
    out = CustomOps().masked_embedding(torch.tensor(IDS, dtype=id_dtype), weight, START)
    assert out.dtype == dtype and out.shape == (len(IDS), HIDDEN)
    assert torch.equal(out, expected_rows(IDS, weight, START))
    assert out[[0, 1, 2, 7, 8, 9]].eq(0).all() and out[[3, 4, 5, 6, 10]].ne(0).all()


def test_reference_at_start_zero_and_for_no_tokens():
    weight = torch.randn(ROWS, HIDDEN)
    ids = [ROWS - 1, 0, ROWS, 3]
    assert torch.equal(CustomOps().masked_embedding(torch.tensor(ids), weight, 0), expected_rows(ids, weight, 0))
    assert CustomOps().masked_embedding(torch.tensor([], dtype=torch.int64), weight, 0).shape == (0, HIDDEN)


@dataclass(frozen=True)
class NoSum(TensorParallel):
    """One rank of a TP group whose all-reduce the test does by hand (sums the ranks' outputs)."""

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        return x


class RecordingOps(CustomOps):
    def __init__(self) -> None:
        self.starts: list[int] = []

    def masked_embedding(self, ids, weight, start):
        self.starts.append(start)
        return super().masked_embedding(ids, weight, start)


def test_vocab_parallel_embedding_computes_through_its_ops():
    vocab, hidden = 101, 8  # 51 rows a rank; rank 1's last row is padding
    full = torch.randn(vocab, hidden)
    ids = torch.tensor([0, 50, 51, 100, 7, 77])
    ops = [RecordingOps(), RecordingOps()]
    shares = []
    for rank in range(2):
        layer = VocabEmbedding(vocab, hidden, torch.float32, NoSum(rank, 2), ops[rank])
        layer.load_weight("weight", full)
        shares.append(layer(ids))
    assert [o.starts for o in ops] == [[0], [51]]
    assert torch.equal(shares[0] + shares[1], F.embedding(ids, full))
