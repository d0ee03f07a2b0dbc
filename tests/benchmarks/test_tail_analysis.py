"""scripts/device/tail_analysis.py on a hand-made trace: the long client gap around a mixed step, the TTFT
parts, and the garbage-collection and allocator events of the slowest step (the script runs on the GPU
machine only; a format change that breaks it should fail here first)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "tail_analysis.py"


def _module():
    spec = importlib.util.spec_from_file_location("tail_analysis", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_mixed_step_gap_ttft_parts_and_events(tmp_path):
    t0 = 100.0
    steps = [dict(step=t0 + ms / 1e3, seconds=0.005, tokens=20, seqs=20, outputs=20) for ms in (0, 7, 14, 41, 48, 55)]
    steps.insert(3, dict(step=t0 + 0.021, seconds=0.019, tokens=300, seqs=21, outputs=20, device_allocs=2))
    core = [*steps,
            dict(request="r1", arrival=t0, received=t0 + 0.002, launched=t0 + 0.005, first_token=t0 + 0.014),
            dict(gc=2, start=t0 + 0.025, seconds=0.006, collected=3),
            dict(gc=0, start=t0 - 5.0, seconds=0.2, collected=0)]  # before the run: not counted
    _write_jsonl(tmp_path / "core.jsonl", core)
    _write_jsonl(tmp_path / "api_7.jsonl", [dict(gc=1, start=t0 + 0.030, seconds=0.001, collected=0),
                                             dict(request="r1", arrival=t0, first_output=t0 + 0.016)])
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"start_times": [t0], "ttfts": [0.016], "itls": [[0.007, 0.027, 0.007]]}))

    summary = _module().analyse(tmp_path / "core.jsonl", result)

    assert summary["long_gaps"] == 1 and summary["long_gaps_by_cause"]["mixed_step_inside"] == 1
    assert summary["mixed_steps"]["n"] == 1 and summary["mixed_steps"]["p50_ms"] == 20.0
    slowest = summary["slowest_steps"][0]
    assert (slowest["tokens"], slowest["ms"], slowest["gc_ms"], slowest["device_allocs"]) == (300, 20.0, 6.0, 2)
    assert summary["steps_with_allocator_events"] == {"device_allocs": 1, "alloc_retries": 0}
    assert summary["gc_pauses"]["core"] == {"n": 1, "total_ms": 6.0, "max_ms": 6.0, "n_5ms": 1}
    assert summary["gc_pauses"]["api_7"]["n"] == 1
    parts = summary["ttft_parts"]
    assert [parts[k]["p50_ms"] for k in ("queue_to_core", "wait_for_launch", "first_step", "back_to_handler")] \
        == [2.0, 3.0, 9.0, 2.0]
