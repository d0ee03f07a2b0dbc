"""The csrc masked embedding (a vocab-parallel rank's lookup in one kernel) equals the torch reference
bit for bit: 16-byte rows (vector path) and others (element path), a weight that is not 16-byte
aligned, ids at the edges of the rank's rows, int32 ids through the ops API, CUDA graph replays."""

from __future__ import annotations

import pytest
import torch

from pagoda.interfaces.ops import CustomOps

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytestmark = pytest.mark.gpu

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
REF = CustomOps()
START, ROWS = 5000, 1000


def token_ids(num_tokens: int, seed: int) -> torch.Tensor:
    """Random ids around [START, START + ROWS), the edges first: [num_tokens] int64 on the GPU."""
    edges = torch.tensor([START - 1, START, START + ROWS - 1, START + ROWS, 0])
    spread = torch.randint(START - ROWS, START + 2 * ROWS, (num_tokens,), generator=torch.Generator().manual_seed(seed))
    return torch.cat((edges, spread))[:num_tokens].cuda()


def weight_rows(rows: int, hidden: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    """[rows, hidden] contiguous, starting ``offset`` elements into its storage; no zero entries."""
    flat = (torch.rand(rows * hidden + offset, device="cuda") + 1).to(dtype)  # in [1, 2]
    return flat[offset:].view(rows, hidden)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", [4096, 4100, 8])
@pytest.mark.parametrize("num_tokens", [1, 5, 300])
def test_kernel_equals_the_reference(cuda_ops, dtype, hidden, num_tokens):
    weight, ids = weight_rows(ROWS, hidden, dtype), token_ids(num_tokens, hidden + num_tokens)
    out = torch.full((num_tokens, hidden), float("nan"), dtype=dtype, device="cuda")
    cuda_ops.kernels.masked_embedding(out, ids, weight, START)
    expected = REF.masked_embedding(ids, weight, START)
    assert torch.equal(out, expected)
    assert torch.equal(cuda_ops.masked_embedding(ids, weight, START), expected)
    mine = (ids >= START) & (ids < START + ROWS)
    assert out[~mine].eq(0).all() and out[mine].ne(0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_weight_and_int32_ids(cuda_ops, dtype):
    weight = weight_rows(ROWS, 4096, dtype, offset=1)  # rows start 2 or 4 bytes past 16: the element path
    assert weight.data_ptr() % 16 != 0
    ids = token_ids(64, 3).int()
    assert torch.equal(cuda_ops.masked_embedding(ids, weight, START), REF.masked_embedding(ids.long(), weight, START))


def test_the_binding_checks_its_arguments(cuda_ops):
    weight, ids = weight_rows(ROWS, 64, torch.bfloat16), token_ids(4, 0)
    out = torch.empty(4, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(RuntimeError, match="ids must be a contiguous int64"):
        cuda_ops.kernels.masked_embedding(out, ids.int(), weight, START)
    with pytest.raises(RuntimeError, match="weight must be a contiguous"):
        cuda_ops.kernels.masked_embedding(out, ids, weight.t(), START)
    with pytest.raises(RuntimeError, match="out must be a contiguous"):
        cuda_ops.kernels.masked_embedding(out[:3], ids, weight, START)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_graph_replay_reads_fresh_ids(cuda_ops, dtype):
    """Captured once, replayed on new ids that a kernel inside the graph computes (the dependent waits for it)."""
    weight, raw = weight_rows(ROWS, 4096, dtype), token_ids(16, 1)
    cuda_ops.masked_embedding(raw + 0, weight, START)  # warm-up (lazy module loads) before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ids = raw + 0  # [16] int64, written by a kernel in the graph
        out = cuda_ops.masked_embedding(ids, weight, START)
    for seed in range(4):
        raw.copy_(token_ids(16, 10 + seed))
        graph.replay()
        assert torch.equal(out, REF.masked_embedding(raw, weight, START))
