"""benchmarks/peers, what makes the comparison fair: fresh prompts for every run, the prefix-cache hit rate of
each run from /metrics, matched limits by default, the same warm-up, what vLLM chose (from its log), the mixed
lengths, and README's table rendered from the raw files (a drift check)."""

from __future__ import annotations

import copy
import json
import math
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "benchmarks" / "peers"
sys.path.insert(0, str(PEERS))

import engines  # noqa: E402
import mixed_lengths  # noqa: E402
import prefix_cache  # noqa: E402
import readme_table  # noqa: E402
import report  # noqa: E402
import vllm_log  # noqa: E402
import workloads  # noqa: E402
from prompts import write_sharegpt_file  # noqa: E402
from serving import pagoda_choices, server_info_choices, workload_prompts  # noqa: E402


def test_every_served_run_has_prompts_of_its_own():
    runs = [*workloads.served_workloads((math.inf, 4, 8, 16)), *workloads.mixed_workloads((math.inf, 4, 8, 16)),
            workloads.PREFIX, workloads.WARMUP]
    assert len({w.seed for w in runs}) == len(runs)
    starts = []
    for w in runs:
        prompts = workload_prompts(workloads.quick(w), 128256)
        starts.append({tuple(ids[:4]) for ids, _ in prompts})
        assert len(starts[-1]) == (w.num_prefixes if w.num_prefixes else len(prompts))
    assert len(set().union(*starts)) == sum(map(len, starts))  # no two runs share the start of a prompt
    assert workloads.served_workloads((8,))[0].seed == workloads.rate_seed(8) != workloads.rate_seed(math.inf)


# Prometheus text as the servers write it (values made up; vLLM labels by model and engine).
VLLM_BEFORE = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 66560.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 1024.0
"""
VLLM_AFTER = VLLM_BEFORE.replace("66560.0", "97280.0").replace("} 1024.0", "} 1088.0")
PAGODA_BEFORE = 'pagoda:prefix_cache_hit_rate{model_name="m"} 0.5\npagoda:prompt_tokens_total{model_name="m"} 1000\n'
PAGODA_AFTER = 'pagoda:prefix_cache_hit_rate{model_name="m"} 0.25\npagoda:prompt_tokens_total{model_name="m"} 2000\n'


def test_hit_rate_over_a_run_from_counters_or_the_gauge():
    parse = prefix_cache.parse_metrics
    counted = prefix_cache.window(parse(VLLM_BEFORE), parse(VLLM_AFTER))
    assert counted == {"hit_rate": pytest.approx(64 / 30720), "queries": 30720.0, "method": "counters"}
    estimated = prefix_cache.window(parse(PAGODA_BEFORE), parse(PAGODA_AFTER))
    assert estimated["hit_rate"] == pytest.approx(0.0) and estimated["method"].startswith("estimated")
    hits = PAGODA_AFTER.replace("0.25", "0.4")  # 800 hit tokens of 2000: 300 of the run's 1000
    assert prefix_cache.window(parse(PAGODA_BEFORE), parse(hits))["hit_rate"] == pytest.approx(0.3)
    assert prefix_cache.window({}, {})["hit_rate"] is None
    assert prefix_cache.flagged(0.3, expects_hits=False) and not prefix_cache.flagged(0.3, expects_hits=True)
    assert not prefix_cache.flagged(0.002, expects_hits=False) and not prefix_cache.flagged(None, False)


VLLM_LOG = """\
(APIServer pid=3360) INFO 11-27 23:03:31 [api_utils.py:327] vLLM server version 0.26.0, serving model /tmp/peers/model
(APIServer pid=3360) INFO 11-27 23:03:31 [api_utils.py:286] non-default args: {'model': '/tmp/peers/model', \
'max_num_seqs': 256, 'max_num_batched_tokens': 8192}
(EngineCore pid=3428) INFO 11-27 23:03:40 [core.py:134] Initializing a V1 LLM engine (v0.26.0) with config: \
model='/tmp/peers/model', enable_chunked_prefill=True, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, \
'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [512, 256, 8, 4, 2, 1]}
(EngineCore pid=3428) INFO 11-27 23:03:45 [cuda.py:507] Using FLASH_ATTN attention backend out of potential \
backends: ['FLASH_ATTN', 'TRITON_ATTN', 'FLEX_ATTENTION'].
(EngineCore pid=3428) INFO 11-27 23:03:45 [flash_attn.py:598] Using FlashAttention version 3
(EngineCore pid=3428) INFO 11-27 23:03:58 [kv_cache_utils.py:2328] GPU KV cache size: 891,248 tokens, Maximum \
concurrency for 2,048 tokens per request: 435.18x
"""


def test_vllm_choices_are_read_from_its_log():
    found = vllm_log.values(vllm_log.parse(VLLM_LOG))
    assert found == {"version": "0.26.0", "attention_backend": "FLASH_ATTN", "flash_attn_version": 3,
                     "compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "FULL_AND_PIECEWISE",
                     "cudagraph_capture_sizes": [512, 256, 8, 4, 2, 1], "max_num_batched_tokens": 8192,
                     "max_num_seqs": 256, "kv_cache_tokens": 891248}
    kept = (ROOT / "benchmarks/results/h100_vs_vllm/peers_offline_logs.txt").read_text()  # a real vLLM 0.26 log
    real = vllm_log.values(vllm_log.parse(kept))
    assert real["cuda_graphs_captured"] == {"PIECEWISE": 51, "FULL": 35}
    assert real["graph_capture"] == "3 secs, took 0.58 GiB"
    assert (real["attention_backend"], real["flash_attn_version"], real["kv_cache_tokens"]) == ("FLASH_ATTN", 3, 449968)


def test_server_info_choices():
    info = {"vllm_config": {"scheduler_config": {"max_num_seqs": 1024, "max_num_batched_tokens": 8192, "x": 1},
                            "attention_config": {"backend": "FLASH_ATTN"},
                            "compilation_config": {"mode": 3, "cudagraph_capture_sizes": [1, 2]}}}
    assert server_info_choices(info) == {
        "scheduler_config.max_num_seqs": 1024, "scheduler_config.max_num_batched_tokens": 8192,
        "attention_config.backend": "FLASH_ATTN", "compilation_config.mode": 3,
        "compilation_config.cudagraph_capture_sizes": [1, 2]}


def test_the_same_warm_up_offline_and_both_servers_get_it():
    cmd = engines.vllm_offline_cmd(engines.Settings(model_dir=Path("/m")), workloads.OFFLINE, None, Path("r.json"))
    assert cmd[cmd.index("--warmup-prompts") + 1] == "256" and cmd[cmd.index("--warmup-output-len") + 1] == "8"
    assert cmd[cmd.index("--limits") + 1] == "matched"
    assert engines.vllm_env(engines.Settings(model_dir=Path("/m")))["VLLM_SERVER_DEV_MODE"] == "1"  # its reset route
    w = workloads.WARMUP
    assert (w.num_prompts, w.input_len, w.output_len, math.isinf(w.request_rate)) == (256, 256, 32, True)


def test_mixed_lengths_file_is_what_its_shape_renders_and_small():
    assert mixed_lengths.DISTRIBUTION.read_text() == mixed_lengths.render()
    assert mixed_lengths.DISTRIBUTION.stat().st_size < 4096
    assert "SYNTHETIC" in mixed_lengths.DISTRIBUTION.read_text().splitlines()[0]
    bins = mixed_lengths.load()
    assert sum(b.probability for b in bins) == pytest.approx(1.0, abs=1e-4)
    pairs = mixed_lengths.draw(20_000, 3)
    assert pairs == mixed_lengths.draw(20_000, 3) and pairs != mixed_lengths.draw(20_000, 4)
    assert all(4 <= i <= 1024 and 4 <= o <= 1024 for i, o in pairs)
    stats = mixed_lengths.summary(pairs)
    assert 120 < stats["input"]["mean"] < 160 and 60 < stats["input"]["p50"] < 100  # long tail: mean >> median
    assert 240 < stats["output"]["mean"] < 300 and stats["output"]["p99"] > 800
    assert max(i for i, _ in mixed_lengths.draw(50, 0, max_len=32)) <= 32


def test_mixed_requests_reach_both_clients_alike(tmp_path):
    from transformers import AutoTokenizer

    from model_dir import build_model_dir

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 500}))
    tok = AutoTokenizer.from_pretrained(build_model_dir(tmp_path / "cfg", tmp_path / "model"), local_files_only=True)
    w = workloads.quick(workloads.mixed_workloads((8,))[0])
    prompts = workload_prompts(w, 500)
    entries = json.loads(write_sharegpt_file(tmp_path / "m.json", prompts).read_text())
    for (ids, out), entry in zip(prompts, entries):  # what vLLM's ShareGPT loader counts: prompt and reply tokens
        human, gpt = (turn["value"] for turn in entry["conversations"])
        assert tok(human)["input_ids"] == ids and len(tok(gpt)["input_ids"]) == out
    cmd = engines.vllm_client_cmd(engines.Settings(model_dir=tmp_path), "http://x", "m", w, tmp_path / "r.json",
                                  tmp_path / "m.json")
    assert cmd[cmd.index("--dataset-name") + 1] == "sharegpt" and cmd[cmd.index("--seed") + 1] == str(w.seed)
    assert cmd[cmd.index("--temperature") + 1] == "0" and cmd[cmd.index("--ready-check-timeout-sec") + 1] == "0"


def served(ttft: float, limits: str, hit_rate: float = 0.0) -> dict:
    raw = {"completed": 10, "request_throughput": 5.0, "p50_ttft_ms": ttft, "p99_itl_ms": 20.0}
    (m,) = report.from_served("serve_256x256_rate8", "pagoda", "x", raw, limits)
    m["prefix_cache"] = {"hit_rate": hit_rate, "flagged": prefix_cache.flagged(hit_rate, False)}
    return m


def measured(limits: str, pagoda_ttft: float, vllm_ttft: float, vllm_hits: float = 0.0) -> list[dict]:
    return [{**served(pagoda_ttft, limits), "engine": "pagoda"}, {**served(vllm_ttft, limits, vllm_hits), "engine": "vllm"}]


def test_matched_and_own_limits_stay_apart_and_hits_are_flagged():
    rows = report.side_by_side(measured("matched", 20.0, 25.0) + measured("own", 30.0, 25.0, vllm_hits=0.4))
    ttft = {r["limits"]: r for r in rows if r["metric"] == "p50_ttft_ms"}
    assert ttft["matched"]["pagoda_advantage"] == 1.25 and ttft["own"]["pagoda_advantage"] == pytest.approx(25 / 30)
    assert not ttft["matched"]["cache_flag"] and ttft["own"]["cache_flag"]
    assert ttft["own"]["prefix_cache_hit_rate"] == {"pagoda": 0.0, "vllm": 0.4}
    assert "FLAG: prompts not fresh" in report.format_table(rows)


def fair_run(limits: str, measurements: list[dict]) -> dict:
    return {"date": "2026-12-01T00:00:00Z", "device": "NVIDIA H200", "parts": ["serve"], "measurements": measurements,
            "settings": {"limits": limits, "fresh_prompts_per_run": True, "warmup": "same"},
            "vllm_choices": {"vllm_server": {"attention_backend": "FLASH_ATTN", "flash_attn_version": 3,
                                             "compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "FULL_AND_PIECEWISE",
                                             "cudagraph_capture_sizes": [1, 2, 512]}}}


def test_readme_label_says_like_for_like_only_when_the_files_show_it():
    merged = report.merge_runs([fair_run("matched", measured("matched", 20.0, 25.0)),
                                fair_run("own", measured("own", 30.0, 25.0))])
    text = readme_table.render(merged, ("a.json",))
    assert "Matched scheduler limits (256 sequences, 8192 tokens a step on both): like for like." in text
    assert "Each engine at its own scheduler defaults (Pagoda's: 256 sequences): not like-for-like (limits " \
           "unmatched)." in text  # vLLM's limits where its /server_info was recorded (the committed file's test)
    assert "attention FLASH_ATTN (FlashAttention 3), compilation VLLM_COMPILE, CUDA graphs FULL_AND_PIECEWISE at " \
           "3 sizes up to 512" in text and "pending" not in text
    assert "| 8 req/s | `pagoda bench serve` | 5.0 vs 5.0 (1.00x) | 20.0 ms vs 25.0 ms (1.25x) |" in text
    hit = report.merge_runs([fair_run("matched", measured("matched", 20.0, 25.0, vllm_hits=0.3))])
    assert "not like-for-like (prefix-cache hits in serve_256x256_rate8)" in readme_table.render(hit, ("a.json",))


def test_readme_says_which_rows_are_medians_of_repeats():
    once = report.merge_runs([fair_run("matched", measured("matched", 20.0, 25.0))])
    assert "medians over" not in readme_table.render(once, ("a.json",))
    again = measured("matched", 30.0, 35.0) + measured("matched", 10.0, 15.0)
    merged = report.merge_runs([fair_run("matched", measured("matched", 20.0, 25.0) + again)])
    text = readme_table.render(merged, ("a.json",))
    assert "Rows of `serve_256x256_rate8` are medians over 3 server starts of each engine, alternating" in text
    assert "| 8 req/s | `pagoda bench serve` | 5.0 vs 5.0 (1.00x) | 20.0 ms vs 25.0 ms (1.25x) |" in text


def test_own_limits_label_names_what_pagoda_recorded():
    own = fair_run("own", measured("own", 30.0, 25.0))
    own["pagoda_choices"] = {"max_num_seqs": 512, "max_num_batched_tokens": 16384, "attention": "flash"}
    text = readme_table.render(report.merge_runs([own]), ("a.json",))
    assert "own scheduler defaults (Pagoda's, from its start-up line: 512 sequences, 16384 tokens a step)" in text
    own["vllm_choices"].update({"server_info": {"scheduler_config.max_num_seqs": 1024,
                                                "scheduler_config.max_num_batched_tokens": 8192},
                                "vllm_offline+latency": {"max_num_batched_tokens": 16384}})
    text = readme_table.render(report.merge_runs([own]), ("a.json",))
    assert ("vLLM's, from its /server_info: 1024 sequences, 8192 tokens a step (offline, from its log: 16384 tokens "
            "a step)): not like-for-like") in text


def test_pagoda_choices_are_read_from_its_last_start_up_line(tmp_path):
    (tmp_path / "pagoda_server.log").write_text(
        "INFO Pagoda engine: platform CUDA | attention triton | max_num_seqs 128 | max_num_batched_tokens 4096\n"
        "INFO Pagoda engine: platform CUDA (H100) | attention flash (pagoda-attention-flash 0.1.0) | quantization "
        "none | KV cache 100 blocks x 16 = 1600 tokens | max_num_seqs 256 | max_num_batched_tokens 8192\n")
    assert pagoda_choices(tmp_path) == {
        "platform": "CUDA (H100)", "attention": "flash (pagoda-attention-flash 0.1.0)", "quantization": "none",
        "KV cache": "100 blocks x 16 = 1600 tokens", "max_num_seqs": 256, "max_num_batched_tokens": 8192}
    assert pagoda_choices(tmp_path / "none") == {}


def test_readme_block_is_what_the_committed_results_render():
    """README.md's comparison with vLLM equals what `python -m benchmarks.peers.report --readme` renders from the
    files it names (run that after changing them)."""
    block = readme_table.render(readme_table.load(readme_table.SOURCES), readme_table.SOURCES)
    readme = readme_table.README.read_text()
    assert readme_table.replace_block(readme, block) == readme
    assert "Matched scheduler limits (256 sequences, 8192 tokens a step on both): like for like." in block
    assert "behind on 6: ITL p99 256/256 at once, mixed lengths at once," in block  # each with its workload
    assert "at 8 req/s (vllm client)" not in block and "| 9.13 ms vs 9.62 ms (1.05x) |" in block
    assert "| 187 ms vs 182 ms (0.97x) |" in block and "| 10.6 ms vs 14.0 ms (1.31x) |" in block  # ITL p99
    assert "own scheduler defaults (Pagoda's, from its start-up line: 256 sequences, 8192 tokens a step; vLLM's, " \
           "from its /server_info: 1024 sequences, 8192 tokens a step (offline, from its log: 16384 tokens a " \
           "step)): not like-for-like (limits unmatched)." in block


def test_readme_check_fails_on_a_stale_block(tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(readme_table.README.read_text().replace("(1.31x)", "(0.31x)"))
    assert readme_table.main(readme_table.SOURCES, check=True, readme=stale) == 1
    assert readme_table.main(readme_table.SOURCES, readme=stale) == 0
    assert readme_table.main(readme_table.SOURCES, check=True, readme=stale) == 0
    with pytest.raises(ValueError, match="markers"):
        readme_table.replace_block("no markers", "x")


def test_runs_made_before_limits_were_recorded_merge_as_own():
    kept = json.loads((ROOT / readme_table.SOURCES[0]).read_text())
    old = {"settings": {}, "measurements": [{k: v for k, v in m.items() if k != "limits"}
                                            for m in copy.deepcopy(kept["measurements"])]}
    merged = report.merge_runs([old])
    assert {m["limits"] for m in merged["measurements"]} == {"own"}
    assert {r["limits"] for r in merged["rows"]} == {"own"}


def tiny_llama_config(folder: Path) -> Path:
    config = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=512, hidden_size=64,
                  intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False)
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_repeats_must_be_positive(tmp_path, capsys):
    import run

    assert run.main(["--engines", "pagoda", "--parts", "serve", "--repeats", "0", "--work-dir", str(tmp_path)]) == 2
    assert "--repeats must be at least 1 (got 0)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pagoda") is None, reason="the harness runs the pagoda command")
def test_repeats_start_the_server_again_on_fresh_prompts(tmp_path):
    """--repeats 2: a second server start with its own warm-up, log and steps, on prompts of another seed."""
    import subprocess

    done = subprocess.run([sys.executable, str(PEERS / "run.py"), "--engines", "pagoda", "--quick", "--config",
                           str(tiny_llama_config(tmp_path / "cfg")), "--parts", "serve", "--rates", "inf", "--repeats",
                           "2", "--out", str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"), "--budget-s",
                           "300", "--pagoda-flag=--attention-backend=torch"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "peers_serve.json").read_text())
    assert [s["name"] for s in result["steps"]] == [
        "server_start", "quick_warmup_256x32[warm-up]", "quick_serve_256x256_inf[pagoda client]",
        "server_start#2", "quick_warmup_256x32[warm-up]#2", "quick_serve_256x256_inf[pagoda client]#2"]
    assert [m.get("repeat", 0) for m in result["measurements"]] == [0, 1] and result["settings"]["repeats"] == 2
    assert all(m["prefix_cache"]["hit_rate"] == 0.0 for m in result["measurements"])  # the repeat's prompts are new
    prompts = sorted((tmp_path / "work" / "prompts").glob("quick_serve_256x256_inf_*.jsonl"))
    assert len(prompts) == 2 and prompts[0].read_text() != prompts[1].read_text()
    logs = (tmp_path / "out" / "peers_serve_logs.txt").read_text()
    assert "===== pagoda_server.log" in logs and "===== pagoda_server#2.log" in logs


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pagoda") is None, reason="the harness runs the pagoda command")
def test_a_quick_served_run_end_to_end_on_cpu(tmp_path):
    """Pagoda alone (no vLLM here), tiny dummy model: the warm-up, a reset before each run, the hit rate and the
    steps of each run from /metrics (0: fresh prompts), matched limits, the whole logs kept."""
    import subprocess

    tiny_llama_config(tmp_path / "cfg")
    stale = tmp_path / "work" / "logs" / "vllm_server.log"  # an earlier run's, left on a warm machine
    stale.parent.mkdir(parents=True)
    stale.write_text("non-default args: {'max_num_seqs': 1024}\n")
    done = subprocess.run([sys.executable, str(PEERS / "run.py"), "--engines", "pagoda", "--quick", "--config",
                           str(tmp_path / "cfg"), "--parts", "serve,mixed", "--rates", "inf,8", "--out",
                           str(tmp_path / "out"), "--work-dir", str(tmp_path / "work"), "--budget-s", "300",
                           "--pagoda-flag=--attention-backend=torch"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "peers_serve_mixed.json").read_text())
    assert [s["name"] for s in result["steps"]][:2] == ["server_start", "quick_warmup_256x32[warm-up]"]
    assert all(s["status"] == "ok" for s in result["steps"])
    assert {m["workload"] for m in result["measurements"]} == {
        "quick_serve_256x256_inf", "quick_serve_256x256_rate8", "quick_mixed_sharegpt_like_inf",
        "quick_mixed_sharegpt_like_rate8"}
    for m in result["measurements"]:
        assert m["limits"] == "matched" and m["prefix_cache"]["reset"] == "ok"
        assert m["prefix_cache"]["hit_rate"] == 0.0 and m["prefix_cache"]["queries"] > 0
        steps = m["steps"]  # the run's steps from Pagoda's histogram of tokens a step
        assert steps["steps"] > 0 and sum(steps["buckets"].values()) == steps["steps"] and steps["ms_per_step"] > 0
    assert result["settings"]["limit_flags"] == ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
    logs = (tmp_path / "out" / "peers_serve_mixed_logs.txt").read_text()
    assert "===== pagoda_server.log" in logs and "$ pagoda serve" in logs
    assert result["vllm_choices"] == {} and "'max_num_seqs': 1024" not in logs  # this run's logs only
    choices = result["pagoda_choices"]  # from the server's start-up line
    assert (choices["max_num_seqs"], choices["max_num_batched_tokens"], choices["attention"]) == (256, 8192, "torch")
