"""The CPU comparison's harness (benchmarks/cpu), Pagoda's side only (vLLM's CPU build is not installed in CI):
the model folder every engine loads, a quick offline run measured in its own process, the report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.cpu import run  # noqa: E402


def test_a_quick_offline_run_records_pagoda_and_its_memory(tmp_path):
    out = tmp_path / "peers.json"
    run.main(["--quick", "--parts", "offline", "--vllm-venv", "none", "--no-hf", "--out", str(out),
              "--model-dir", str(tmp_path / "model")])
    record = json.loads(out.read_text())
    (row,) = record["offline"]
    assert row["engine"] == "pagoda" and row["output_tokens"] == 4 * 8 and row["num_prompts"] == 4
    assert 100e6 < row["peak_rss_bytes"] < 4e9  # the whole process, the 135M float32 model in it
    assert (tmp_path / "peers_logs" / "offline_64x128_128_pagoda.log").is_file()
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["torch_dtype" if "torch_dtype" in config else "dtype"] == "float32" and "quantization_config" not in config
    assert "| 64x128/128 | pagoda |" in run.report(record)


def test_the_engines_run_with_the_same_limits(tmp_path):
    engine = run.Engine("pagoda", "pagoda", sys.executable)
    cmd = run.offline_cmd(engine, tmp_path, tmp_path / "p.json", 16, "bfloat16")
    assert [a for a in cmd if a.startswith(("--max", "--dtype"))] == [
        "--dtype=bfloat16", "--max-model-len=2048", "--max-num-seqs=256", "--max-num-batched-tokens=8192"]
