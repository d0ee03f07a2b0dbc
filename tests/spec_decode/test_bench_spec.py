"""`pagoda bench throughput|latency` with --speculative-config report the drafts' acceptance."""

from __future__ import annotations

import json

from pagoda.cli.main import main

SPEC = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": false}'


def _config_dir(tmp_path) -> str:
    import transformers

    transformers.LlamaConfig(vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    return str(tmp_path)


def _consistent(spec: dict) -> None:
    assert spec["rounds"] > 0 and spec["draft_tokens"] >= spec["rounds"]
    assert spec["acceptance_rate"] == spec["accepted_tokens"] / spec["draft_tokens"]
    assert spec["mean_acceptance_length"] == 1 + spec["accepted_tokens"] / spec["rounds"]
    assert len(spec["acceptance_per_position"]) == 3
    assert spec["steps"] > 0 and spec["suspended_steps"] == 0  # "backoff": false never suspends


def test_throughput_and_latency_report_acceptance(tmp_path) -> None:
    """A vocabulary of 8 tokens: every sequence repeats itself, so the n-gram proposer drafts."""
    model = _config_dir(tmp_path)
    common = [model, "--load-format", "dummy", "--speculative-config", SPEC, "--max-num-seqs", "4"]
    out = tmp_path / "throughput.json"
    assert main(["bench", "throughput", *common, "--num-prompts", "4", "--input-len", "12", "--output-len", "16",
                 "--result-file", str(out)]) == 0
    result = json.loads(out.read_text())
    assert round(result["pagoda"]["output_tokens_per_s"] * result["pagoda"]["seconds"]) == 4 * 16
    _consistent(result["speculative"])
    out = tmp_path / "latency.json"
    assert main(["bench", "latency", *common, "--batch-sizes", "2", "--input-len", "8", "--output-len", "8",
                 "--repeats", "1", "--result-file", str(out)]) == 0
    _consistent(json.loads(out.read_text())["steps"][0]["speculative"])
