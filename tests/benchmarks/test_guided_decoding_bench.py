"""benchmarks/guided_decoding.py end to end on a tiny model over SmolLM2's vocabulary: every mode
generates exactly batch x output-len tokens (the schema cannot complete sooner), the result file
carries the ratios and the per-step timings of each path."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "guided"))

import guided_decoding  # noqa: E402
from guided_models import make_tiny_smollm_vocab_model  # noqa: E402


def test_guided_benchmark_runs_both_modes_to_full_length(tmp_path, monkeypatch) -> None:
    model = make_tiny_smollm_vocab_model(tmp_path / "model")
    result_file = tmp_path / "result.json"
    monkeypatch.setattr(sys, "argv", ["guided_decoding.py", model, "--batch-size", "3", "--output-len", "12",
                                      "--repeats", "1", "--kv-cache-memory", str(32 << 20), "--serial", "--legacy",
                                      "--breakdown", "--result-file", str(result_file)])
    guided_decoding.main()  # asserts every run produced batch x output-len tokens
    result = json.loads(result_file.read_text())
    assert result["vocab_size"] == 49152 and result["ratio_guided_over_unguided"] > 0
    assert result["ratio_serial_over_unguided"] > 0 and result["ratio_legacy_over_unguided"] > 0
    assert len(result["runs_tokens_per_s"]["guided_json"]) == 1
    steps = result["per_step_ms"]
    assert "sample_later_ms" in steps["guided_json"] and "fill_ms" in steps["guided_json"]  # filled on the worker
    assert "sample_later_ms" not in steps["guided_serial"] and "fill_ms" in steps["guided_serial"]
