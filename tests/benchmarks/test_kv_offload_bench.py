"""benchmarks/kv_offload_multiturn.py end to end on a tiny Llama with a device cache smaller than the chats' history:
the baseline run recomputes evicted histories, the offload run loads them from host memory and computes fewer
prompt tokens; the report has both runs' TTFT and counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests" / "engine"))

import kv_offload_multiturn  # noqa: E402
from tiny_models import make_tiny_model  # noqa: E402


def test_offload_loads_evicted_histories(tmp_path, monkeypatch) -> None:
    make_tiny_model(tmp_path / "model", "llama")
    result_file = tmp_path / "result.json"
    block_bytes = 2 * 2 * 8 * 2 * 16 * 4  # a block of 8 tokens of the tiny Llama (float32)
    monkeypatch.setattr(sys, "argv", [
        "kv_offload_multiturn.py", str(tmp_path / "model"), "--dtype", "float32", "--block-size", "8",
        "--kv-cache-memory", str(24 * block_bytes), "--conversations", "4", "--turns", "3", "--history-len", "40",
        "--user-len", "8", "--output-len", "4", "--kv-offload-gib", "0.01", "--result-file", str(result_file)])
    kv_offload_multiturn.main()
    result = json.loads(result_file.read_text())
    base, offload = result["no_offload"], result["offload"]
    assert base["all"]["requests"] == offload["all"]["requests"] == 12
    assert base["evicted"]["requests"] > 0, "the chats' histories should not fit the device cache"
    assert base["kv_loaded_blocks"] == 0 < offload["kv_loaded_blocks"]
    assert offload["prompt_tokens_computed"] < base["prompt_tokens_computed"]
    assert result["ratio_evicted_p50_ttft"] > 0
