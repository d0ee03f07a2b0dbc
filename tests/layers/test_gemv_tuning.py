"""Which weights the GEMV's rows-a-warp tuning times, and how it chooses (pagoda.layers.gemv_tuning).

The GPU timer and the kernel's bit-identical rows choices: plugins/platform_cuda/tests/test_dense_gemv.py.
"""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from pagoda.interfaces.quantization import QuantizationMethod
from pagoda.layers import csrc_ops
from pagoda.layers.csrc_ops import CsrcOps
from pagoda.layers.embedding import LMHead
from pagoda.layers.gemv_tuning import ROWS_BY_SHAPE_ENV, choose_rows, forced_rows, gemv_weights
from pagoda.layers.linear import Linear
from pagoda.layers.ops import CustomOps
from pagoda.quantization.unquantized import UnquantizedMethod

BF16 = torch.bfloat16


class OwnKernel(QuantizationMethod):
    """A method with bf16 weights that multiplies them itself (not through CustomOps.linear)."""

    def create_weights(self, layer: nn.Module, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        layer.weight = nn.Parameter(torch.zeros(out_features, in_features, dtype=dtype), requires_grad=False)

    def apply(self, layer, x, bias):
        return x @ layer.weight.T


def dense(in_features: int, out_features: int, dtype: torch.dtype = BF16, method=None) -> Linear:
    return Linear(in_features, out_features, bias=False, quant_method=method or UnquantizedMethod(), dtype=dtype)


def tiny_model() -> nn.Module:
    return nn.ModuleList([
        dense(64, 128), dense(64, 128), dense(64, 256),  # two of one shape, one of another
        LMHead(100, 64, BF16),
        dense(64, 96, method=OwnKernel()),  # its own kernel: not timed
        dense(60, 128),  # rows of 120 bytes: the GEMV does not take them
        dense(64, 128, dtype=torch.float32),  # fp32: F.linear
    ])


def test_dense_weights_grouped_by_shape():
    model = tiny_model()
    shapes = gemv_weights(model)
    assert set(shapes) == {(128, 64, BF16), (256, 64, BF16), (100, 64, BF16)}
    assert [w is model[i].weight for i, w in enumerate(shapes[(128, 64, BF16)])] == [True, True]
    assert shapes[(100, 64, BF16)][0] is model[3].weight


def test_the_faster_choice_per_shape_one_row_on_ties():
    timed = []

    def timer(weights: list[torch.Tensor]) -> dict[int, float]:
        timed.append(len(weights))
        n = weights[0].shape[0]
        return {128: {1: 10.0, 2: 9.0}, 256: {1: 4.0, 2: 6.0}, 100: {1: 5.0, 2: 5.0}}[n]

    chosen = choose_rows(tiny_model(), timer)
    assert chosen == {(128, 64, BF16): 2, (256, 64, BF16): 1, (100, 64, BF16): 1}
    assert sorted(timed) == [1, 1, 2]  # each shape timed once, over all its weights


def test_tuning_off_leaves_the_kernels_rule(monkeypatch):
    class Kernels:  # any call would fail: nothing may be timed
        pass

    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 1
    monkeypatch.setenv("PAGODA_GEMV_TUNE", "0")
    assert ops.tune(tiny_model()) == "" and ops.gemv_rows == {}
    monkeypatch.delenv("PAGODA_GEMV_TUNE")
    ops.dense_gemv_tokens = 0  # the GEMV itself off
    assert ops.tune(tiny_model()) == "" and ops.gemv_rows == {}
    assert CustomOps().tune(tiny_model()) == ""


def test_rows_forced_by_shape_parse_and_errors():
    assert forced_rows(None) == {} and forced_rows("") == {}
    assert forced_rows("4096x7168:1, 14336x4096:2,") == {(4096, 7168): 1, (14336, 4096): 2}
    for bad in ("4096x7168", "4096:1", "4096x7168:3", "ax7168:1", "4096*7168:1"):
        with pytest.raises(ValueError, match=re.escape(f"{ROWS_BY_SHAPE_ENV}: '{bad}' is not NxK:ROWS with ROWS 1 or 2")):
            forced_rows(bad)


def test_forced_rows_win_over_the_tuned_ones(monkeypatch):
    """CsrcOps.linear launches a forced shape with its forced rows, a tuned shape with the tuned rows, and any
    other with 0 (the kernel's rule); the tuning's log line names the forced shapes."""
    launched = []

    class Kernels:
        def dense_gemv(self, x, weight, bias, split, rows):
            launched.append((tuple(weight.shape), rows))

    monkeypatch.setenv(ROWS_BY_SHAPE_ENV, "128x64:1")
    monkeypatch.setenv("PAGODA_GEMV_TUNE", "0")
    monkeypatch.setattr(csrc_ops, "gemv_fits", lambda *args: True)  # CPU tensors standing in for GPU ones
    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 1
    ops.gemv_rows = {(128, 64, BF16): 2, (256, 64, BF16): 2}
    x = torch.zeros(1, 64, dtype=BF16)
    for n in (128, 256, 96):
        ops.linear(x, torch.zeros(n, 64, dtype=BF16))
    assert launched == [((128, 64), 1), ((256, 64), 2), ((96, 64), 0)]
    assert ops.tune(tiny_model()) == f"dense GEMV rows a warp forced by {ROWS_BY_SHAPE_ENV}: 128x64: 1"
