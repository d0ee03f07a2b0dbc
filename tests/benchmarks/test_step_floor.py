"""pagoda.bench.step_floor: each step's floor is the larger of its compute and memory times; with overlapped
steps a call's time is the step launched before it (tests/engine/test_trace.py: the trace counts the attention
work each floor needs)."""

from __future__ import annotations

import pytest

from pagoda.bench.step_floor import StepCosts, step_report, timed_steps

COSTS = StepCosts(body_params=1000, head_params=100, attention_flops_per_pair=10.0, weight_bytes=5000,
                  kv_bytes_per_token=10, matmul_flops=1e6, copy_bytes=1e4)


def test_a_floor_is_the_larger_of_compute_and_memory():
    decode = {"tokens": 4, "seqs": 4, "kv": 100, "pairs": 100}  # compute 9.8e-3 s, memory 0.6 s
    assert COSTS.floor_s(decode) == pytest.approx((5000 + 10 * 100) / 1e4)
    prefill = {"tokens": 1000, "seqs": 2, "kv": 1000, "pairs": 250_000}  # compute 4.9 s, memory 1.5 s
    assert COSTS.floor_s(prefill) == pytest.approx((2 * 1000 * 1000 + 2 * 100 * 2 + 10 * 250_000) / 1e6)


def test_overlapped_calls_time_the_step_before_them():
    calls = [{"seconds": 0.1, "tokens": 8, "seqs": 2}, {"seconds": 0.5, "tokens": 2, "seqs": 2},
             {"seconds": 0.2, "tokens": 2, "seqs": 2}, {"seconds": 0.3, "tokens": 0, "seqs": 0}]
    assert [t for _, t in timed_steps(calls, overlap=True)] == [0.5, 0.2, 0.3]  # the empty call waited for the last
    assert [t for _, t in timed_steps(calls, overlap=False)] == [0.1, 0.5, 0.2]
    for call, (kv, pairs, start) in zip(calls, [(8, 21, 100.2), (10, 10, 100.3), (12, 12, 100.85), (0, 0, 101.05)]):
        call.update(kv=kv, pairs=pairs, step=start)
    report = step_report(calls, COSTS, overlap=True, wall_s=1.5, since=100.0)
    assert (report["decode"]["steps"], report["mixed"]["steps"], report["all"]["steps"]) == (2, 1, 3)
    assert report["mixed"]["seconds"] == 0.5 and report["decode"]["seconds"] == 0.5
    assert report["outside_steps_s"] == pytest.approx(0.4)
    assert report["before_first_step_s"] == pytest.approx(0.2) and report["after_last_step_s"] == pytest.approx(0.15)
    assert report["decode"]["ratio_to_floor"] == pytest.approx(0.5 / (COSTS.floor_s(calls[1]) + COSTS.floor_s(calls[2])),
                                                               rel=1e-3)
