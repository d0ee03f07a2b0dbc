"""benchmarks/trace_report.py on a hand-written trace folder: step times by kind, the slowest steps with the
garbage-collection pauses inside them, each first token's parts joined across the core's and an API server's
files, and the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.trace_report import main, percentiles, report  # noqa: E402

T0 = 1000.0


def _write(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    steps = [{"step": T0 + i * 0.01, "seconds": 0.005, "tokens": 8, "seqs": 8, "outputs": 8} for i in range(9)]
    steps.append({"step": T0 + 0.1, "seconds": 0.030, "tokens": 264, "seqs": 9, "outputs": 8, "device_allocs": 2})
    steps.append({"step": T0 + 0.2, "seconds": 0.001, "tokens": 0, "seqs": 0, "outputs": 0})  # idle: not counted
    firsts = [{"request": "a", "arrival": T0, "received": T0 + 0.001, "launched": T0 + 0.004, "first_token": T0 + 0.014},
              {"request": "b", "arrival": T0, "received": T0 + 0.002, "launched": T0 + 0.050, "first_token": T0 + 0.090}]
    pause = {"gc": 2, "start": T0 + 0.12, "seconds": 0.004, "collected": 10}  # inside the mixed step
    _write(tmp_path / "core.jsonl", steps + firsts + [pause])
    _write(tmp_path / "api_7.jsonl", [{"request": "a", "arrival": T0 - 0.001, "first_output": T0 + 0.016},
                                      {"gc": 0, "start": T0, "seconds": 0.001, "collected": 3}])
    return tmp_path


def test_steps_by_kind_and_the_slowest_with_its_pauses(trace: Path) -> None:
    got = report(trace, top=2)
    assert got["steps"]["decode"] == {"count": 9, "p50_ms": 5.0, "p90_ms": 5.0, "p99_ms": 5.0, "max_ms": 5.0}
    assert got["steps"]["mixed"]["count"] == 1 and got["steps"]["mixed"]["max_ms"] == 30.0
    assert got["steps"]["all"]["count"] == 10 and got["steps"]["all"]["p99_ms"] == 30.0
    slowest = got["slowest_steps"][0]
    assert slowest == {"at_s": 0.1, "ms": 30.0, "kind": "mixed", "tokens": 264, "seqs": 9, "gc_ms": 4.0,
                       "device_allocs": 2}
    assert got["slowest_steps"][1]["gc_ms"] == 0.0 and len(got["slowest_steps"]) == 2


def test_the_call_after_each_mixed_step(tmp_path: Path) -> None:
    """A mixed step's host time exceeding the device's shows as a short call after it (the device had finished)."""
    kinds = [(8, 0.006), (40, 0.020), (8, 0.001), (8, 0.006), (300, 0.012), (8, 0.009), (8, 0.006)]
    _write(tmp_path / "core.jsonl", [{"step": T0 + i * 0.03, "seconds": s, "tokens": t, "seqs": 8, "outputs": 8}
                                     for i, (t, s) in enumerate(kinds)])
    got = report(tmp_path)["steps"]
    assert got["mixed"]["count"] == 2 and got["after_mixed"] == {"count": 2, "p50_ms": 1.0, "p90_ms": 9.0,
                                                                 "p99_ms": 9.0, "max_ms": 9.0}


def test_long_client_gaps_by_what_the_core_ran(tmp_path: Path) -> None:
    """A client's gaps over 12 ms: inside a mixed step, inside a decode step over 1.5x the median, or neither."""
    steps = [(0.000, 0.006, 8), (0.006, 0.020, 40), (0.026, 0.006, 8), (0.032, 0.015, 8), (0.047, 0.006, 8),
             (0.053, 0.006, 8)]
    _write(tmp_path / "core.jsonl", [{"step": T0 + a, "seconds": s, "tokens": t, "seqs": 8, "outputs": 8}
                                     for a, s, t in steps])
    # request 1: gaps of 6 (short), 20 (during the mixed step), 15 (the slow decode step); request 2 starts after
    # the core's last step: its 30 ms gap is outside the core
    client = {"start_times": [T0, T0 + 0.060], "ttfts": [0.0, 0.001], "itls": [[0.006, 0.020, 0.015], [0.030]]}
    got = report(tmp_path, client=client)["long_itls"]
    assert got["long"] == 3 and got["threshold_ms"] == 12.0 and got["client_itl"]["count"] == 4
    assert got["by_cause"] == {"mixed_step": 1, "slow_decode_step": 1, "outside_the_core": 1}


def test_first_tokens_split_into_their_parts(trace: Path) -> None:
    got = report(trace, top=5)
    a, b = sorted(got["slowest_first_tokens"], key=lambda r: r["request"])
    assert a == {"request": "a", "to_core_ms": 1.0, "queued_ms": 3.0, "prefill_ms": 10.0, "to_handler_ms": 2.0,
                 "ttft_ms": 17.0}
    assert b == {"request": "b", "to_core_ms": 2.0, "queued_ms": 48.0, "prefill_ms": 40.0}  # no API line: core parts
    assert got["slowest_first_tokens"][0]["request"] == "b"  # 90 ms from arrival against a's 17
    assert got["first_tokens"]["queued"]["max_ms"] == 48.0 and got["first_tokens"]["ttft"]["count"] == 1
    assert got["gc"] == {"core": {"count": 1, "total_ms": 4.0, "max_ms": 4.0, "full": 1},
                         "api_7": {"count": 1, "total_ms": 1.0, "max_ms": 1.0, "full": 0}}


def test_since_keeps_what_began_after_it(trace: Path) -> None:
    got = report(trace, since=T0 + 0.095)  # after the decode steps and both arrivals
    assert got["steps"]["all"]["count"] == 1 and got["steps"]["mixed"]["count"] == 1
    assert got["slowest_first_tokens"] == [] and got["gc"]["core"]["count"] == 1 and got["gc"]["api_7"]["count"] == 0


def test_nearest_rank_percentiles() -> None:
    assert percentiles([]) == {"count": 0}
    values = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert percentiles(values) == {"count": 100, "p50_ms": 50.0, "p90_ms": 90.0, "p99_ms": 99.0, "max_ms": 100.0}


def test_command_line(trace: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "report.json"
    main([str(trace), "--top", "1", "--since", str(T0), "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(capsys.readouterr().out)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nowhere")])
    assert "has no core.jsonl: run the server with PAGODA_TRACE_DIR" in capsys.readouterr().err
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"p99_itl_ms": 1.0}))
    with pytest.raises(SystemExit):
        main([str(trace), "--client", str(summary)])
    assert "has no per-request gaps: run `pagoda bench serve` with --save-detailed" in capsys.readouterr().err
