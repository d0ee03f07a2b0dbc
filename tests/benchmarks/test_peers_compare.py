"""benchmarks/peers/compare.py: one engine under two settings, medians over server starts and their ratios."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))

import compare  # noqa: E402

REPEATS = ROOT / "benchmarks" / "results" / "h100_prefill_cap" / "repeats"


def run(engine: str, throughputs: list[float], itl_p99: list[float], workload: str = "serve_inf") -> dict:
    """A run.py result with one measurement per server start."""
    return {"measurements": [
        {"workload": workload, "client": "pagoda", "engine": engine, "limits": "matched", "repeat": i,
         "metrics": {"request_throughput": t, "p99_itl_ms": itl, "p50_ttft_ms": 1000.0 * (i + 1)}}
        for i, (t, itl) in enumerate(zip(throughputs, itl_p99))]}


def test_medians_ranges_and_ratio_over_every_start_of_both_files():
    base = [run("pagoda", [50.0, 40.0], [200.0, 180.0]), run("pagoda", [46.0], [190.0]), run("vllm", [99.0], [9.0])]
    other = [run("pagoda", [45.0, 47.0], [150.0, 140.0])]
    (row,) = compare.compare(base, other)
    tput, itl = row["metrics"]["request_throughput"], row["metrics"]["p99_itl_ms"]
    assert tput["base"] == {"median": 46.0, "min": 40.0, "max": 50.0, "starts": 3}  # vLLM's start not counted
    assert tput["other"] == {"median": 46.0, "min": 45.0, "max": 47.0, "starts": 2}
    assert tput["ratio"] == 1.0 and itl["ratio"] == pytest.approx(145.0 / 190.0)
    assert "p99_ttft_ms" not in row["metrics"]  # neither side measured it
    table = compare.markdown([row], "off", "on").splitlines()
    assert table[0] == "| workload, setting | starts | requests/s | TTFT p50 | ITL p99 |"
    assert table[2] == "| serve_inf, off | 3 | 46.0 (40.0-50.0) | 1.00 s (1.00-2.00) | 190.0 ms (180.0-200.0) |"
    assert table[3] == "| serve_inf, on | 2 | 46.0 (45.0-47.0), 1.00x | 1.50 s (1.00-2.00), 1.50x | 145.0 ms (140.0-150.0), 0.76x |"


def test_only_workloads_both_settings_ran():
    rows = compare.compare([run("pagoda", [1.0], [1.0], "a"), run("pagoda", [1.0], [1.0], "b")],
                           [run("pagoda", [2.0], [1.0], "b")])
    assert [r["workload"] for r in rows] == ["b"]


def test_no_common_workload_is_an_error(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(run("pagoda", [1.0], [1.0], "a")))
    (tmp_path / "b.json").write_text(json.dumps(run("vllm", [1.0], [1.0], "a")))
    with pytest.raises(SystemExit):
        compare.main(["--base", str(tmp_path / "a.json"), "--other", str(tmp_path / "b.json")])
    assert "no workload that pagoda ran under both settings" in capsys.readouterr().err


def test_prefill_cap_readme_table_is_this_output(capsys):
    """The repeated table in h100_prefill_cap/README.md is the command's output from the committed files."""
    assert compare.main(["--base", *map(str, sorted(REPEATS.glob("*_off.json"))), "--other",
                         *map(str, sorted(REPEATS.glob("*_cap6144.json"))), "--labels", "off,6144", "--markdown"]) == 0
    printed = capsys.readouterr().out.strip()
    readme = (REPEATS.parent / "README.md").read_text()
    assert re.search(r"--labels off,6144 --markdown\n\n", readme) and printed in readme
