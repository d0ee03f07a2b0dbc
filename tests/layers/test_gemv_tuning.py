"""Which weights the GEMV's tuning times, and how it chooses a split and rows a warp (pagoda.layers.gemv_tuning).

The GPU timer and the kernel's bit-identical rows choices: plugins/platform_cuda/tests/test_dense_gemv.py.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from gloo_ranks import on_two_ranks
from pagoda.interfaces.parallel import TensorParallel
from pagoda.interfaces.quantization import QuantizationMethod
from pagoda.layers import csrc_ops
from pagoda.layers.csrc_ops import CsrcOps
from pagoda.layers.embedding import LMHead
from pagoda.layers.gemv_tuning import SPLIT_TOLERANCE, choose_configs, fastest, gemv_weights, slowest_rank
from pagoda.layers.linear import Linear
from pagoda.interfaces.ops import CustomOps
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


def test_no_tuning_without_the_gemv():
    class Kernels:  # any call would fail: nothing may be timed
        pass

    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 0  # the platform sends no layer to the GEMV
    assert ops.tune(tiny_model()) == "" and ops.gemv_configs == {}
    assert CustomOps().tune(tiny_model()) == ""


def test_tune_times_each_shape_and_logs_its_choice(monkeypatch):
    monkeypatch.setattr(csrc_ops, "graph_timer", lambda kernels: lambda weights: {
        (split, rows): 1.0 for split in (1, 2, 4) for rows in (1, 2)})
    ops = CsrcOps(object())
    ops.dense_gemv_tokens = 1
    assert ops.tune(tiny_model()).startswith("dense GEMV configurations (warps a row / rows a warp) timed in ")
    assert ops.gemv_configs and set(ops.gemv_configs.values()) == {(1, 1)}


def test_linear_launches_the_tuned_configuration(monkeypatch):
    """CsrcOps.linear launches a tuned shape with its tuned split and rows, any other with 0s (the kernel's
    rules)."""
    launched = []

    class Kernels:
        def dense_gemv(self, x, weight, bias, split, rows):
            launched.append((tuple(weight.shape), split, rows))

    monkeypatch.setattr(csrc_ops, "gemv_fits", lambda *args: True)  # CPU tensors standing in for GPU ones
    ops = CsrcOps(Kernels())
    ops.dense_gemv_tokens = 1
    ops.gemv_configs = {(128, 64, BF16): (4, 2), (256, 64, BF16): (2, 1)}
    x = torch.zeros(1, 64, dtype=BF16)
    for n in (128, 256, 96):
        ops.linear(x, torch.zeros(n, 64, dtype=BF16))
    assert launched == [((128, 64), 4, 2), ((256, 64), 2, 1), ((96, 64), 0, 0)]
