"""scripts/device/rank_waits.py's analysis on a hand-made trace (the script itself runs on the GPU
machine): each fused LL sum's exclusive time, grouped by the grid of the GEMV before it; the sums with
no GEMV before them (a step's first) left out; the kernel table counts them all."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "device"))

from rank_waits import report, sum_waits  # noqa: E402
from trace_kernels import timed  # noqa: E402

SUM = "void pagoda::ll_all_reduce_add_rms_norm_kernel<__nv_bfloat16, 1>(...)"


def kernel(name: str, ts: float, dur: float, grid: int = 1) -> dict:
    return {"cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"grid": [grid, 1, 1]}}


def test_sums_are_grouped_by_the_gemv_before_them(tmp_path):
    events = [kernel(SUM, 0, 4),  # a step's first sum: no GEMV before it
              kernel("void pagoda::dense_gemv_kernel<o>(...)", 5, 10, grid=256),
              kernel(SUM, 12, 6),  # starts inside the GEMV (programmatic launch): 3 us past its end
              kernel("void pagoda::dense_gemv_kernel<down>(...)", 20, 10, grid=512),
              kernel(SUM, 31, 4),  # after a 1 us gap: 4 us
              kernel("void pagoda::dense_gemv_kernel<o>(...)", 40, 10, grid=256),
              kernel(SUM, 50, 5)]
    assert sum_waits(timed(events)) == {256: [3.0, 5.0], 512: [4.0]}
    trace = tmp_path / "rank1.1.pt.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": [*events, {"cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50}]}, f)
    text = report(trace, steps=1)
    assert "sums after the GEMV of grid 256: 2, mean 4.00 us, median 4.00" in text
    assert "sums after the GEMV of grid 512: 1, mean 4.00 us" in text
    (row,) = [line for line in text.splitlines() if line.endswith("ll_all_reduce_add_rms_norm_kernel<__nv_bfloat16, 1>")]
    assert row.split()[:3] == ["4.0", "4.75", "4.00"]  # every sum in the table: 4 a step, mean 4.75, exclusive 4
