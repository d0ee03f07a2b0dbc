"""Applying a token bitmask: the torch table path, the Triton kernel (TRITON_INTERPRET=1 on CPU)
and GuidedSampling's staging, each equal to an independent numpy reference, exactly."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from pagoda.request import Request
from pagoda.guided.bitmask import apply_bitmask, bitmask_words, forbid_by_caps
from pagoda.sampling_params import GuidedDecodingParams
from pagoda.guided.runtime import GuidedSampling
from pagoda.guided.xgrammar_backend import fill_threads, usable_cpus
from pagoda.sampling_params import SamplingParams
from pagoda.testing import interpreted_kernels

VOCABS = [64, 1000, 4133]  # a multiple of 32, and two that end inside a word


def random_bitmask(rows: int, vocab: int, seed: int) -> torch.Tensor:
    """``[rows, words]`` int32 with random bits (padding bits random too: they must be ignored)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2**31, 2**31 - 1, (rows, bitmask_words(vocab)), generator=g, dtype=torch.int32)


def reference(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """numpy: unpack each row's bits (little-endian), set forbidden logits to -inf."""
    out = logits.clone()
    vocab = logits.shape[1]
    for i, row in enumerate(rows):
        bits = np.unpackbits(bitmask[i].numpy().view(np.uint8), bitorder="little")[:vocab].astype(bool)
        out[row, torch.from_numpy(~bits)] = float("-inf")
    return out


def special_logits(rows: int, vocab: int, dtype: torch.dtype) -> torch.Tensor:
    """Random logits with +inf, -inf and -0.0 among them (the masking must keep them where allowed)."""
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)).to(dtype)
    logits[:, 0], logits[:, 1], logits[:, 2] = float("inf"), float("-inf"), -0.0
    return logits


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal up to the sign of zero (equal values, equal infinities)."""
    return torch.equal(a, b) and torch.equal(torch.isinf(a), torch.isinf(b))


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_caps_path_equals_the_reference(vocab: int, dtype: torch.dtype) -> None:
    logits, bitmask = special_logits(5, vocab, dtype), random_bitmask(5, vocab, seed=vocab)
    expected = reference(logits, bitmask, list(range(5)))
    forbid_by_caps(logits, bitmask)
    assert same(logits, expected)


@pytest.mark.parametrize("vocab", VOCABS)
def test_apply_bitmask_masks_only_the_given_rows(vocab: int) -> None:
    logits, bitmask = special_logits(6, vocab, torch.float32), random_bitmask(3, vocab, seed=7)
    rows = [4, 0, 2]  # rows 1, 3 and 5 have no grammar: untouched
    expected = reference(logits, bitmask, rows)
    apply_bitmask(logits, bitmask, torch.tensor(rows))
    assert same(logits, expected)
    assert same(logits[[1, 3, 5]], special_logits(6, vocab, torch.float32)[[1, 3, 5]])


def test_a_bitmask_too_short_for_the_logits_is_refused() -> None:
    with pytest.raises(ValueError, match="covers 32 tokens, but the logits have 40"):
        apply_bitmask(torch.zeros(1, 40), random_bitmask(1, 32, seed=0))


@pytest.fixture(scope="module")
def bitmask_triton():
    yield from interpreted_kernels("pagoda.guided.bitmask_triton")


@pytest.mark.parametrize("vocab", [64, 1000, 2100])
@pytest.mark.parametrize("with_index", [False, True])
def test_triton_kernel_equals_the_reference(bitmask_triton, vocab: int, with_index: bool) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits, bitmask = special_logits(4, vocab, torch.bfloat16), random_bitmask(3 if with_index else 4, vocab, seed=3)
    rows = [3, 1, 0] if with_index else [0, 1, 2, 3]
    expected = reference(logits, bitmask, rows)
    got = logits.to(device)
    index = torch.tensor(rows, device=device) if with_index else None
    bitmask_triton.apply_bitmask_triton(got, bitmask.to(device), index)
    assert same(got.cpu(), expected)


def test_triton_kernel_respects_a_padded_row_stride(bitmask_triton) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    wide = special_logits(2, 1100, torch.float32)
    expected = wide.clone()
    bitmask = random_bitmask(2, 1000, seed=5)
    expected[:, :1000] = reference(wide[:, :1000].contiguous(), bitmask, [0, 1])
    got = wide.to(device)
    bitmask_triton.apply_bitmask_triton(got[:, :1000], bitmask.to(device), None)  # a view: row stride 1100
    assert same(got.cpu(), expected)  # the 100 columns past the view are untouched


@pytest.mark.gpu
def test_apply_bitmask_on_the_gpu_from_pinned_memory() -> None:
    logits, bitmask = special_logits(8, 128256, torch.bfloat16), random_bitmask(8, 128256, seed=9)
    expected = reference(logits, bitmask, list(range(8)))
    got = logits.cuda()
    apply_bitmask(got, bitmask.pin_memory())
    assert same(got.cpu(), expected)


class EveryOtherBackend:
    """Stands in for a backend's fill: row ``r`` allows tokens ``t`` with ``t % 3 == r % 3``."""

    def fill_bitmasks(self, matchers: list, bitmask: torch.Tensor, rows: list[int]) -> None:
        vocab = bitmask.shape[1] * 32
        for row in rows:
            allowed = (torch.arange(vocab) % 3) == row % 3
            bitmask[row] = torch.from_numpy(np.packbits(allowed.numpy(), bitorder="little").view(np.int32))


def test_guided_sampling_stages_in_one_reused_host_buffer_and_masks_only_guided_rows(monkeypatch) -> None:
    buffers: list[int] = []

    def host_buffer(nbytes: int) -> torch.Tensor:
        buffers.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)

    vocab = 100
    guided = GuidedSampling(tokenizer=None, vocab_size=vocab, stop_token_ids=[0], host_buffer=host_buffer)
    guided.backends["auto"] = EveryOtherBackend()  # type: ignore[assignment]
    monkeypatch.setattr(guided, "_advance_all", lambda reqs, prev: [_live_state() for _ in reqs])
    params = SamplingParams(guided_decoding=GuidedDecodingParams(regex="x"))
    requests = [Request("a", [1], SamplingParams()), Request("b", [1], params), Request("c", [1], params)]
    for _ in range(2):
        logits = torch.zeros(3, vocab)
        guided.mask(logits, requests)
        assert torch.isfinite(logits[0]).all()
        for row, slot in ((1, 0), (2, 1)):
            assert torch.equal(torch.isfinite(logits[row]), torch.arange(vocab) % 3 == slot % 3)
    # the row index, then 2 rows of words; pageable memory is reused by the second step
    assert buffers == [8 * 2 + 4 * 2 * bitmask_words(vocab)]


def _live_state():
    from pagoda.guided.runtime import MatcherState

    class Live:
        def is_terminated(self) -> bool:
            return False

    return MatcherState(Live())  # type: ignore[arg-type]


def test_fill_threads_stay_within_the_cpus_this_process_may_use() -> None:
    assert 1 <= fill_threads() <= max(1, usable_cpus() // 2)
    assert fill_threads(limit=1) == 1
    assert usable_cpus() <= (os.cpu_count() or 1)


def test_xgrammar_fills_on_one_thread_until_a_batch_is_slow(monkeypatch) -> None:
    """xgrammar's threaded fill starts its threads on every call: used only after a slow batch, and
    one thread is timed again every RECHECK_EVERY batches."""
    from pagoda.guided import xgrammar_backend

    calls: list[str] = []

    class Batch:
        def __init__(self, name: str) -> None:
            self.name = name

        def batch_fill_next_token_bitmask(self, matchers: list, bitmask, rows: list[int]) -> None:
            calls.append(self.name)

    backend = xgrammar_backend.XgrammarBackend.__new__(xgrammar_backend.XgrammarBackend)
    backend.one_thread, backend.threaded, backend._threaded_batches = Batch("one"), Batch("threads"), 0
    backend.fill_bitmasks([], None, [])
    monkeypatch.setattr(xgrammar_backend, "SLOW_FILL_S", -1.0)  # from now on every batch is slow on one thread
    for _ in range(xgrammar_backend.RECHECK_EVERY + 2):
        backend.fill_bitmasks([], None, [])
    assert calls == ["one", "one"] + ["threads"] * xgrammar_backend.RECHECK_EVERY + ["one"]
