"""The split argmax of a decode step's few rows against ``torch.argmax``: the same index for
random rows, ties (the first of equals), NaN (the first NaN), every slice position of the max,
rows past the split threshold, vocabularies that do not split, leading dimensions and ``out=``."""

from __future__ import annotations

import pytest
import torch

from pagoda.layers.argmax import SPLIT_ROWS, _groups, argmax

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _on(device: str) -> torch.device:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows,vocab", [(1, 128256), (3, 151936), (8, 32000), (1, 50257), (SPLIT_ROWS, 4096), (2, 100)])
def test_equals_torch_argmax(device, rows, vocab):
    x = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(rows + vocab)).to(_on(device))
    assert torch.equal(argmax(x), torch.argmax(x, dim=-1))


def test_splits_a_batch_one_row():
    assert _groups(1, 128256) == 256 and _groups(1, 151936) == 128 and _groups(1, 50257) == 1
    assert _groups(SPLIT_ROWS, 128256) == 1 and _groups(1, 512) == 2


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_ties_and_nan_take_the_first(device, dtype):
    vocab = 128256
    x = torch.zeros(4, vocab, dtype=dtype, device=_on(device))
    x[0, [7, 501, 90000]] = 3.0  # a tie across slices: the first
    x[1, [900, 901]] = 2.0  # a tie inside one slice
    x[2, [5, 70000]] = float("nan")  # NaN wins, the first of them
    x[3] = 1.0  # all equal: index 0
    got = argmax(x)
    assert got.tolist() == [7, 900, 5, 0] and torch.equal(got, torch.argmax(x, dim=-1))


def test_the_max_at_every_slice_edge():
    vocab = 128256
    width = vocab // _groups(1, vocab)
    for position in (0, width - 1, width, 5 * width + 3, vocab - width, vocab - 1):
        x = torch.randn(1, vocab)
        x[0, position] = 100.0
        assert argmax(x).item() == position


def test_leading_dimensions_and_out():
    x = torch.randn(2, 3, 32000)
    assert torch.equal(argmax(x), torch.argmax(x, dim=-1))
    out = torch.empty(6, dtype=torch.long)
    result = argmax(x.reshape(6, 32000), out=out)
    assert result.data_ptr() == out.data_ptr() and torch.equal(out, torch.argmax(x.reshape(6, 32000), dim=-1))


@pytest.fixture
def one_launch():
    """The Triton argmax module (under the interpreter without CUDA)."""
    from pagoda.testing import interpreted_kernels

    yield from interpreted_kernels("pagoda.layers.argmax_triton")


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rows,vocab", [(1, 128256), (3, 151936), (1, 5000), (2, 100), (1, 1)])
def test_one_launch_equals_torch_argmax(one_launch, rows, vocab):
    """Random rows, one slice to 128 a row; twice, since the rows' counts must return to zero."""
    x = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(vocab)).to(_device())
    out = torch.empty(rows, dtype=torch.int64, device=x.device)
    for _ in range(2):
        assert torch.equal(one_launch.argmax_rows(x, out), torch.argmax(x, dim=-1))


def test_one_launch_ties_nan_and_infinities(one_launch):
    """Ties inside a block, across slices and over a slice boundary, NaN (the first; over +inf), -inf only,
    the max in the last entry."""
    vocab = 128256
    x = torch.zeros(7, vocab, device=_device())
    x[0, [7, 501, 90000]] = 3.0  # a tie across slices: the first
    x[1, [900, 901]] = 2.0  # a tie inside one block
    x[2, [70000, 5]] = float("nan")  # NaN wins, the first of them
    x[3] = float("-inf")  # all -inf: index 0
    x[4, [3, 60000]] = float("inf")
    x[4, 100000] = float("nan")  # NaN beats +inf
    x[5, vocab - 1] = 1.0  # the last entry
    x[6, 2000:4000] = 1.0  # a tie over a slice boundary
    out = torch.empty(7, dtype=torch.int64, device=x.device)
    got = one_launch.argmax_rows(x, out)
    assert got.tolist() == [7, 900, 5, 0, 100000, vocab - 1, 2000] and torch.equal(got, torch.argmax(x, dim=-1))


def test_one_launch_reads_bf16_and_strided_rows(one_launch):
    wide = torch.randn(3, 40000, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(_device())
    x = wide[:, :32000]  # rows 40000 apart (a gathered tensor's vocabulary slice)
    out = torch.empty(3, dtype=torch.int64, device=x.device)
    assert torch.equal(one_launch.argmax_rows(x, out), torch.argmax(x, dim=-1))


@pytest.mark.gpu
def test_argmax_takes_the_one_launch_on_a_gpu(monkeypatch):
    """On a GPU ``argmax`` (the sampler's) takes the one launch for a decode step's rows and gives torch's index,
    ``out=`` included, also inside a CUDA graph replayed after the logits change."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from pagoda.layers import argmax_triton

    launches = []
    monkeypatch.setattr(argmax_triton, "argmax_rows", lambda x, out, real=argmax_triton.argmax_rows:
                        launches.append(x.shape) or real(x, out))
    x = torch.randn(4, 128256, device="cuda")
    out = torch.empty(4, dtype=torch.int64, device="cuda")
    assert torch.equal(argmax(x, out=out), torch.argmax(x, dim=-1)) and torch.equal(out, torch.argmax(x, dim=-1))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        argmax(x, out=out)
    x.copy_(torch.randn(4, 128256, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, torch.argmax(x, dim=-1)) and launches == [(4, 128256)] * 2


def test_a_failing_one_launch_leaves_argmax_to_torch(monkeypatch, caplog):
    """Where the Triton argmax cannot run (a GPU its Triton does not serve), one warning, then torch's kernels."""
    pytest.importorskip("triton")
    import pagoda.layers.argmax as module
    from pagoda.layers import argmax_triton

    def broken(x, out):
        raise RuntimeError("no such target")

    monkeypatch.setattr(module, "_one_launch", lambda x: not module._failed)
    monkeypatch.setattr(module, "_failed", False)
    monkeypatch.setattr(argmax_triton, "argmax_rows", broken)
    x = torch.randn(2, 32000)
    for _ in range(2):
        assert torch.equal(argmax(x), torch.argmax(x, dim=-1))
    assert module._failed and caplog.text.count("one-launch argmax failed") == 1
