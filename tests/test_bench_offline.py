"""`pagoda bench throughput|latency` run end to end on a tiny dummy model and report consistent numbers."""

from __future__ import annotations

import json
import os

import pytest

from pagoda.cli.main import main


def _config_dir(tmp_path):
    import transformers

    transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    return str(tmp_path)


@pytest.mark.parametrize("sampling", [[], ["--temperature", "0.7", "--top-p", "0.9"]])
def test_throughput_counts_every_token(tmp_path, sampling):
    out = tmp_path / "result.json"
    assert main(["bench", "throughput", _config_dir(tmp_path), "--load-format", "dummy", "--num-prompts", "6",
                 "--input-len", "40", "--output-len", "5", "--result-file", str(out), *sampling]) == 0
    result = json.loads(out.read_text())
    assert (result["workload"]["temperature"], result["workload"]["top_p"]) == ((0.7, 0.9) if sampling else (0.0, 1.0))
    p = result["pagoda"]
    assert round(p["output_tokens_per_s"] * p["seconds"]) == 6 * 5
    assert round(p["tokens_per_s"] * p["seconds"]) == 6 * 45
    assert result["roofline"]["compute_floor_s"] > 0
    assert result["cached_prompt_tokens"] == 0  # the warm-up shares no prompt (2 full blocks each) nor leaves any cached


def test_throughput_step_report_times_every_step_against_its_floor(tmp_path, monkeypatch):
    """--step-report: the timed run's steps from the engine core's trace (not the warm-up's), decode-only and mixed
    apart, every token computed in one of them, each kind's time against its floor."""
    monkeypatch.delenv("PAGODA_TRACE_DIR", raising=False)  # a temporary folder, for the run only
    out = tmp_path / "result.json"
    assert main(["bench", "throughput", _config_dir(tmp_path), "--load-format", "dummy", "--num-prompts", "6",
                 "--input-len", "40", "--output-len", "5", "--max-num-seqs", "4", "--step-report",
                 "--result-file", str(out)]) == 0
    steps = json.loads(out.read_text())["steps"]
    decode, mixed, every = steps["decode"], steps["mixed"], steps["all"]
    assert decode["steps"] + mixed["steps"] == every["steps"]
    assert round(every["mean_tokens"] * every["steps"]) == 6 * (40 + 5 - 1)  # the first new token comes from the prefill
    assert decode["mean_tokens"] == decode["mean_seqs"] <= 4
    for kind in (decode, mixed):
        assert kind["ratio_to_floor"] == pytest.approx(kind["seconds"] / kind["floor_s"], rel=1e-2)
    assert every["seconds"] <= json.loads(out.read_text())["pagoda"]["seconds"]
    assert "PAGODA_TRACE_DIR" not in os.environ  # later engines do not trace


def test_throughput_reports_the_kv_capacity_and_a_latent_cache_against_mha(tmp_path):
    """Llama: K and V of each KV head a token a layer. DeepSeek-V2 (multi-head latent attention): one latent row
    (kv_lora_rank + qk_rope_head_dim) a token a layer, and the tokens an MHA layout would fit in the same bytes."""
    import transformers

    llama = json.loads(_throughput(_config_dir(tmp_path / "llama"), tmp_path / "llama.json"))["kv_cache"]
    assert llama["bytes_per_token"] == 2 * 2 * 2 * 8 * 4 and "mha_tokens" not in llama  # layers, K+V, heads, dim, fp32
    transformers.DeepseekV2Config(vocab_size=256, hidden_size=64, intermediate_size=64, moe_intermediate_size=32,
                                  num_hidden_layers=2, num_attention_heads=4, n_routed_experts=4, num_experts_per_tok=2,
                                  q_lora_rank=None, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16,
                                  v_head_dim=16, max_position_embeddings=128,
                                  architectures=["DeepseekV2ForCausalLM"]).save_pretrained(tmp_path / "ds")
    kv = json.loads(_throughput(str(tmp_path / "ds"), tmp_path / "ds.json"))["kv_cache"]
    assert kv["bytes_per_token"] == 2 * (32 + 16) * 4  # layers x latent row, fp32
    assert kv["mha_bytes_per_token"] == 2 * 4 * (16 + 16 + 16) * 4  # layers x heads x (key + value), fp32
    assert kv["mha_tokens"] == kv["tokens"] * kv["bytes_per_token"] // kv["mha_bytes_per_token"]


def _throughput(model: str, out) -> str:
    assert main(["bench", "throughput", model, "--load-format", "dummy", "--num-prompts", "2", "--input-len", "8",
                 "--output-len", "2", "--dtype", "float32", "--kv-cache-memory", str(1 << 20),
                 "--result-file", str(out)]) == 0
    return out.read_text()


def test_latency_reports_each_batch(tmp_path):
    out = tmp_path / "latency.json"
    assert main(["bench", "latency", _config_dir(tmp_path), "--load-format", "dummy", "--batch-sizes", "1,3",
                 "--input-len", "8", "--output-len", "8", "--repeats", "3", "--result-file", str(out)]) == 0
    steps = json.loads(out.read_text())["steps"]
    assert [s["batch"] for s in steps] == [1, 3]
    assert all(s["step_ms"] > 0 and s["floor_ms"] > 0 for s in steps)


def test_latency_profile_traces_each_batch(tmp_path, monkeypatch, capsys):
    args = ["bench", "latency", _config_dir(tmp_path), "--load-format", "dummy", "--batch-sizes", "1,2",
            "--input-len", "8", "--output-len", "3", "--repeats", "1", "--profile"]
    monkeypatch.delenv("PAGODA_TORCH_PROFILER_DIR", raising=False)
    assert main(args) == 2
    assert "--profile needs PAGODA_TORCH_PROFILER_DIR set" in capsys.readouterr().err
    monkeypatch.setenv("PAGODA_TORCH_PROFILER_DIR", str(tmp_path / "traces"))
    assert main(args) == 0
    assert len(list((tmp_path / "traces").glob("rank0.*.pt.trace.json.gz"))) == 2  # one a batch size


def test_latency_kernels_name_each_batch_steps_work(tmp_path, monkeypatch):
    """--kernels: a decode step's work by name (host ops on a CPU), the largest first, with its total; the prefill's
    too, with its floor."""
    monkeypatch.delenv("PAGODA_TORCH_PROFILER_DIR", raising=False)  # a temporary folder, for the run only
    out = tmp_path / "latency.json"
    assert main(["bench", "latency", _config_dir(tmp_path), "--load-format", "dummy", "--batch-sizes", "2",
                 "--input-len", "8", "--output-len", "8", "--repeats", "1", "--kernels", "--result-file", str(out)]) == 0
    row = json.loads(out.read_text())["steps"][0]
    for kernels in (row["kernels_us"], row["prefill_kernels_us"]):
        names = [name for name in kernels if name != "total_us"]
        assert kernels["total_us"] > 0 and any("linear" in name or "mm" in name for name in names)
        assert [kernels[n] for n in names] == sorted((kernels[n] for n in names), reverse=True)
    assert 0 < row["prefill_floor_ms"] < row["prefill_kernels_us"]["total_us"] / 1e3
    assert "PAGODA_TORCH_PROFILER_DIR" not in os.environ  # later profiling still asks for a folder


def test_streamed_weights_leave_out_gathered_embeddings(tmp_path):
    """The memory floor counts weights a step reads whole: an untied input embedding is only
    gathered (left out); a table the LM head shares is read whole (counted once)."""
    import transformers

    from pagoda import LLM
    from pagoda.bench.common import streamed_weights

    for tied in (False, True):
        folder = tmp_path / f"tied{tied}"
        transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                                 architectures=["LlamaForCausalLM"]).save_pretrained(folder)
        model = LLM(model=str(folder), load_format="dummy", skip_tokenizer_init=True).engine.core.parts.model
        everything = sum(p.numel() * p.element_size() for p in model.parameters())  # shared tables once
        table = 256 * 32 * 4  # float32 on CPU
        assert streamed_weights(model)[0] == (everything if tied else everything - table)
