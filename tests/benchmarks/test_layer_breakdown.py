"""scripts/device/layer_breakdown.py on a hand-made trace: a prefill's LM head, then two decode steps of one
layer; the first decode step is left out, the second's kernels summed by kind (exclusive time plus the gap
before each), the rest of the step being its LM head."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "device"))

from layer_breakdown import breakdown  # noqa: E402
from trace_kernels import timed  # noqa: E402


def kernel(name: str, ts: float, dur: float, grid: int = 8) -> dict:
    return {"cat": "kernel", "name": f"void {name}(...)", "ts": ts, "dur": dur, "args": {"grid": [grid, 1, 1]}}


def step(start: float, norm: str, head_grid: int = 1000) -> list[dict]:
    """One layer from ``start`` (the end of the LM head before: a gap of 2), then the LM head: 36 us."""
    t = start + 2
    return [kernel("pagoda::dense_gemv_kernel<qkv>", t, 5),
            kernel("pagoda::rotary_kernel<bf16>", t + 4, 2),  # overlaps qkv's last us: 1 exclusive
            kernel("_decode_kernel", t + 6, 3),
            kernel("pagoda::dense_gemv_kernel<o>", t + 9, 2),
            kernel(norm, t + 11, 1.5),
            kernel("pagoda::dense_gemv_kernel<gate_up>", t + 12.5, 6),
            kernel("pagoda::silu_and_mul_kernel<bf16>", t + 19, 1),  # after a 0.5 us gap
            kernel("pagoda::dense_gemv_kernel<down>", t + 20, 4),
            kernel("pagoda::dense_gemv_kernel<lm_head>", t + 24, 10, grid=head_grid)]


@pytest.mark.parametrize("head_grid", [1000, 4])  # the LM head in the widest grid, or in fewer blocks than a layer's
def test_a_layer_by_kind_and_the_rest_of_the_step(head_grid):
    events = [kernel("pagoda::dense_gemv_kernel<lm_head>", 0, 10, grid=head_grid),  # the prefill's
              *step(10, "pagoda::fused_add_rms_norm_kernel<bf16>", head_grid),  # the first decode step: left out
              *step(46, "pagoda::ll_all_reduce_add_rms_norm_kernel<bf16, 1>", head_grid)]
    out = breakdown(timed(events), layers=1)
    assert out == pytest.approx({"dense GEMVs": 7 + 2 + 6 + 4, "norms / LL sums": 1.5, "attention": 1 + 3,
                                 "SiLU-and-mul": 1.5, "layer": 26, "step": 36, "rest of the step": 10})


def test_too_few_steps_is_an_error():
    with pytest.raises(ValueError, match="two decode steps or more"):
        breakdown(timed(step(0, "pagoda::fused_add_rms_norm_kernel<bf16>")), layers=1)
