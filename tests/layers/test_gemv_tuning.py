"""Which weights the GEMV's tuning times, and how it chooses a split and rows a warp (pagoda.layers.gemv_tuning).

The GPU timer and the kernel's bit-identical rows choices: plugins/platform_cuda/tests/test_dense_gemv.py.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
from torch import nn

from gloo_ranks import on_two_ranks
from pagoda.distributed.parallel import TensorParallel
from pagoda.interfaces.quantization import QuantizationMethod
from pagoda.layers import csrc_ops
from pagoda.layers.csrc_ops import CsrcOps
from pagoda.layers.embedding import LMHead
from pagoda.layers.gemv_tuning import (BY_SHAPE_ENV, SPLIT_TOLERANCE, TUNE_ENV, choose_configs, fastest,
                                      forced_configs, gemv_weights, slowest_rank, tune_mode)
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


def times(split_us: dict[int, float], two_rows: float = 1.0) -> dict[tuple[int, int], float]:
    """Six configurations' times: each split's, two rows a warp ``two_rows`` times one row's."""
    return {(split, rows): us * (two_rows if rows == 2 else 1.0) for split, us in split_us.items() for rows in (1, 2)}


def test_the_fastest_configuration_per_shape():
    timed = []

    def timer(weights: list[torch.Tensor]) -> dict[tuple[int, int], float]:
        timed.append(len(weights))
        n = weights[0].shape[0]
        return {128: times({1: 10.0, 2: 8.0, 4: 6.0}, 0.9), 256: times({1: 4.0, 2: 5.0, 4: 6.0}, 1.5),
                100: times({1: 5.0, 2: 5.0, 4: 5.0})}[n]

    chosen = choose_configs(tiny_model(), timer)
    assert chosen == {(128, 64, BF16): (4, 2), (256, 64, BF16): (1, 1), (100, 64, BF16): (1, 1)}  # ties: fewest
    assert sorted(timed) == [1, 1, 2]  # each shape timed once, over all its weights


def _choose_on_rank(rank: int) -> tuple[dict, dict]:
    """Rank 0 alone would take two rows a warp for the 128-row shape, rank 1 one; the LM head's shape the other
    way round (each rank's own times differ, as timed apart on two GPUs)."""
    own = {128: times({1: 8.0, 2: 10.0, 4: 10.0}, 0.9 if rank == 0 else 1.2),
           256: times({1: 4.0, 2: 5.0, 4: 6.0}),
           100: times({1: 10.0, 2: 8.0 if rank == 0 else 11.0, 4: 10.0})}

    def timer(weights: list[torch.Tensor]) -> dict[tuple[int, int], float]:
        return own[weights[0].shape[0]]

    alone = choose_configs(tiny_model(), timer)
    return alone, choose_configs(tiny_model(), slowest_rank(timer, TensorParallel(rank, 2, dist.group.WORLD)))


def test_ranks_choose_alike_by_the_slowest_ranks_times(tmp_path):
    """Under tensor parallelism every rank takes the configuration best at the slowest rank's times (two gloo
    ranks): the same everywhere, where each alone chose differently."""
    results = on_two_ranks(_choose_on_rank, str(tmp_path / "store"))
    (alone_0, together_0), (alone_1, together_1) = results[0], results[1]
    assert alone_0[(128, 64, BF16)] == (1, 2) and alone_1[(128, 64, BF16)] == (1, 1)
    assert alone_0[(100, 64, BF16)] == (2, 1) and alone_1[(100, 64, BF16)] == (1, 1)
    assert together_0 == together_1 == {(128, 64, BF16): (1, 1), (256, 64, BF16): (1, 1), (100, 64, BF16): (1, 1)}


def test_more_warps_a_row_only_beyond_the_tolerance():
    """The split changes the bits: a faster split within SPLIT_TOLERANCE of fewer warps' time is not taken, so
    that timing noise seldom moves the choice; rows a warp (the same bits) follow the time alone."""
    just_inside, just_outside = 100 / (1 + SPLIT_TOLERANCE) + 0.01, 100 / (1 + SPLIT_TOLERANCE) - 0.01
    assert fastest(times({1: 100.0, 2: 101.0, 4: just_inside})) == (1, 1)
    assert fastest(times({1: 100.0, 2: 101.0, 4: just_outside})) == (4, 1)
    assert fastest(times({1: 100.0, 2: 101.0, 4: 90.0}, 0.99)) == (4, 2)
    assert fastest({(1, 1): 100.0, (1, 2): 100.0, (2, 1): 50.0, (2, 2): 50.5, (4, 1): 49.0, (4, 2): 60.0}) == (2, 1)


def test_tuning_off_leaves_the_kernels_rule(monkeypatch):
    class Kernels:  # any call would fail: nothing may be timed
        pass

    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 1
    monkeypatch.setenv("PAGODA_GEMV_TUNE", "0")
    assert ops.tune(tiny_model()) == "" and ops.gemv_configs == {}
    monkeypatch.delenv("PAGODA_GEMV_TUNE")
    ops.dense_gemv_tokens = 0  # the GEMV itself off
    assert ops.tune(tiny_model()) == "" and ops.gemv_configs == {}
    assert CustomOps().tune(tiny_model()) == ""


def test_tune_modes_and_the_timer_each_asks_for(monkeypatch):
    """PAGODA_GEMV_TUNE: unset or 1 times the GEMVs back to back, norm each after an RMS norm; anything else
    is an error naming the variable and the values."""
    assert [tune_mode(v) for v in (None, "", "1", "0", "norm")] == ["1", "1", "1", "0", "norm"]
    for bad in ("2", "off", "Norm"):
        with pytest.raises(ValueError, match=re.escape(f"{TUNE_ENV}={bad!r}: expected 1 (the default")):
            tune_mode(bad)
    asked = []

    def fake_timer(kernels, after_norm=False):
        asked.append(after_norm)
        return lambda weights: {(split, rows): 1.0 for split in (1, 2, 4) for rows in (1, 2)}

    monkeypatch.setattr(csrc_ops, "graph_timer", fake_timer)
    ops = CsrcOps(object())
    ops.dense_gemv_tokens = 1
    for mode in ("norm", "1"):
        monkeypatch.setenv(TUNE_ENV, mode)
        assert ops.tune(tiny_model()).startswith("dense GEMV configurations (warps a row / rows a warp) timed"
                                                 + (" after a norm" if mode == "norm" else "") + " in ")
    assert asked == [True, False] and set(ops.gemv_configs.values()) == {(1, 1)}
    monkeypatch.setenv(TUNE_ENV, "fast")
    with pytest.raises(ValueError, match=TUNE_ENV):
        ops.tune(tiny_model())


def test_configs_forced_by_shape_parse_and_errors():
    assert forced_configs(None) == {} and forced_configs("") == {}
    assert forced_configs("4096x7168:0/1, 14336x4096:4/2,4096x2048:2/0,") == {
        (4096, 7168): (0, 1), (14336, 4096): (4, 2), (4096, 2048): (2, 0)}
    for bad in ("4096x7168", "4096x7168:1", "4096:4/1", "4096x7168:3/1", "4096x7168:4/3", "ax7168:4/1", "4096*7168:4/1"):
        expected = f"{BY_SHAPE_ENV}: '{bad}' is not NxK:SPLIT/ROWS with SPLIT 0, 1, 2 or 4 and ROWS 0, 1 or 2"
        with pytest.raises(ValueError, match=re.escape(expected)):
            forced_configs(bad)


def test_forced_configs_win_over_the_tuned_ones(monkeypatch):
    """CsrcOps.linear launches a tuned shape with its tuned split and rows, each replaced where its shape forces
    it (0: not forced), and any other with 0s (the kernel's rules); the tuning's log names the forced shapes."""
    launched = []

    class Kernels:
        def dense_gemv(self, x, weight, bias, split, rows):
            launched.append((tuple(weight.shape), split, rows))

    monkeypatch.setenv(BY_SHAPE_ENV, "128x64:0/1,256x64:1/0,32x64:4/2")
    monkeypatch.setenv("PAGODA_GEMV_TUNE", "0")
    monkeypatch.setattr(csrc_ops, "gemv_fits", lambda *args: True)  # CPU tensors standing in for GPU ones
    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 1
    ops.gemv_configs = {(128, 64, BF16): (4, 2), (256, 64, BF16): (2, 2)}
    x = torch.zeros(1, 64, dtype=BF16)
    for n in (128, 256, 32, 96):
        ops.linear(x, torch.zeros(n, 64, dtype=BF16))
    assert launched == [((128, 64), 4, 1), ((256, 64), 1, 2), ((32, 64), 4, 2), ((96, 64), 0, 0)]
    assert ops.tune(tiny_model()) == (f"dense GEMV configurations forced by {BY_SHAPE_ENV}: "
                                      "128x64: 0/1, 256x64: 1/0, 32x64: 4/2")
