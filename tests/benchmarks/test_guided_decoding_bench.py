"""benchmarks/guided_decoding.py end to end on a tiny model over SmolLM2's vocabulary: both modes
generate exactly batch x output-len tokens (the schema cannot complete sooner; the benchmark asserts
it), and the result file's ratios are those of its own medians."""

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
                                      "--repeats", "2", "--kv-cache-memory", str(32 << 20),
                                      "--result-file", str(result_file)])
    guided_decoding.main()
    result = json.loads(result_file.read_text())
    assert result["vocab_size"] == 49152
    runs = result["runs_tokens_per_s"]
    assert set(runs) == {"unguided", "guided_json"} and all(len(r) == 2 for r in runs.values())
    ratio = result["guided_json_tokens_per_s"] / result["unguided_tokens_per_s"]
    assert abs(result["ratio_guided_over_unguided"] - ratio) < 2e-3
    # runs are recorded rounded to 0.1 tok/s, the ratio from the unrounded rates
    assert abs(result["ratio_best_runs"] - max(runs["guided_json"]) / max(runs["unguided"])) < 2e-3
