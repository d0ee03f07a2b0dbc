"""The low-latency all-reduce's Python side on CPU: which sums go to the kernel and which to the fallback,
and a set-up that cannot work (no compiled kernel) leaving every rank on the other paths. The kernel
itself runs in tests/engine/test_tensor_parallel.py on 2 GPUs (``gpu``)."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.distributed as dist

from pagoda.interfaces.ops import CustomOps

ll_all_reduce = pytest.importorskip("pagoda_platform_cuda.ll_all_reduce", reason="pagoda-platform-cuda is not installed")
LLAllReduce = ll_all_reduce.LLAllReduce


class RecordingKernels:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def ll_all_reduce(self, x, peers, state, rank, max_bytes) -> None:
        self.calls.append((x.numel(), rank, max_bytes))
        x.mul_(2)  # what two ranks holding the same x would get

    def ll_all_reduce_add_rms_norm(self, x, residual, weight, eps, peers, state, rank, max_bytes) -> None:
        self.calls.append(("fused", x.numel(), rank, max_bytes))
        out, res = CustomOps().fused_add_rms_norm(2 * x, residual, weight, eps)
        x.copy_(out)
        residual.copy_(res)


class Fallback:
    max_bytes = 1 << 20

    def __init__(self) -> None:
        self.seen: list[int] = []

    def fits(self, x: torch.Tensor) -> bool:
        return x.numel() * x.element_size() <= self.max_bytes

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.numel())
        return x * 2


def make(fallback=None, max_bytes: int = 64 << 10) -> tuple[LLAllReduce, RecordingKernels]:
    kernels = RecordingKernels()
    op = LLAllReduce(kernels, torch.zeros(16, dtype=torch.uint8), torch.tensor([16, 32]), rank=1,
                     fallback=fallback, max_bytes=max_bytes)
    return op, kernels


def test_decode_sized_sums_go_to_the_kernel_in_place() -> None:
    op, kernels = make(Fallback())
    x = torch.ones(4096, dtype=torch.bfloat16)  # one token of hidden 4096: 8 KiB
    assert op.fits(x) and op(x) is x and torch.equal(x, torch.full_like(x, 2))
    assert kernels.calls == [(4096, 1, 64 << 10)]
    assert op.state.dtype == torch.int32 and op.state.tolist() == [0, 0]  # epoch, blocks finished


@pytest.mark.parametrize("x", [
    torch.ones(64 << 10, dtype=torch.float16),  # 128 KiB: above the kernel's 64 KiB here
    torch.ones(3, dtype=torch.bfloat16),  # 6 bytes: not whole 8-byte lines
    torch.ones(8, 4, dtype=torch.float32).t(),  # not contiguous
    torch.ones(8, dtype=torch.int32),  # not a dtype the kernel sums
], ids=["too-big", "odd-bytes", "strided", "int32"])
def test_other_sums_go_to_the_fallback(x: torch.Tensor) -> None:
    fallback = Fallback()
    op, kernels = make(fallback)
    assert op.fits(x) and torch.equal(op(x), x * 2)
    assert kernels.calls == [] and fallback.seen == [x.numel()]


def test_without_a_fallback_only_what_the_kernel_takes_fits() -> None:
    op, _ = make(None)
    assert op.fits(torch.ones(4096, dtype=torch.bfloat16))
    assert not op.fits(torch.ones(64 << 10, dtype=torch.float16))


def test_the_fused_norm_takes_decode_rows_in_place() -> None:
    op, kernels = make(Fallback())
    x, residual, weight = torch.randn(2, 64), torch.randn(2, 64), torch.rand(64) + 0.5
    expected, expected_residual = CustomOps().fused_add_rms_norm(2 * x, residual.clone(), weight, 1e-5)
    assert op.fits_add_rms_norm(x, residual, weight)
    got, got_residual = op.add_rms_norm(x, residual, weight, 1e-5)
    assert got is x and got_residual is residual and kernels.calls == [("fused", 128, 1, 64 << 10)]
    assert torch.allclose(got, expected) and torch.allclose(got_residual, expected_residual)
    assert not op.fits_add_rms_norm(torch.randn(2, 6), torch.randn(2, 6), torch.ones(6))  # 24-byte rows
    assert not op.fits_add_rms_norm(x, residual.half(), weight)
    assert not op.fits_add_rms_norm(torch.randn(64 << 10, 2), torch.randn(64 << 10, 2), torch.ones(2))  # too big
    for hidden, fits in ((8192, True), (8196, False)):  # rows up to 32 KiB (two chunks a thread)
        assert op.fits_add_rms_norm(torch.randn(1, hidden), torch.randn(1, hidden), torch.ones(hidden)) == fits


def test_create_without_the_kernel_leaves_every_rank_on_the_other_paths(caplog) -> None:
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:0", rank=0, world_size=1)
    try:
        with caplog.at_level(logging.WARNING):
            made = ll_all_reduce.create(object(), dist.group.WORLD, torch.device("cpu"), 2)
        assert made is None
        assert "low-latency all-reduce kernel unavailable (the platform's compiled kernels have no ll_all_reduce)" \
            in caplog.text
        with caplog.at_level(logging.WARNING):
            assert ll_all_reduce.create(RecordingKernels(), dist.group.WORLD, torch.device("cpu"), 9) is None
        assert "9 ranks; the kernel takes at most 8" in caplog.text
    finally:
        dist.destroy_process_group()
