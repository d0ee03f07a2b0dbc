"""benchmarks/peers: the logic around the GPU runs (workloads, prompts, tokenizer, time limits, merging,
ratios, chart). The engines themselves run on the GPU machine; vLLM's results are fed in as its
benchmark writes them."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

PEERS = Path(__file__).resolve().parents[2] / "benchmarks" / "peers"
sys.path.insert(0, str(PEERS))

import report  # noqa: E402
import workloads  # noqa: E402
from model_dir import build_model_dir  # noqa: E402
from prompts import ids_to_text, prefix_prompts, random_token_prompts  # noqa: E402
from steps import Deadline, Server, StepRecord, run_step  # noqa: E402


def test_offline_prompts_equal_pagoda_bench_prompts():
    from pagoda.bench.common import random_prompts

    assert random_token_prompts(7, 33, 1000, 0) == random_prompts(7, 33, 1000, 0)
    assert random_token_prompts(7, 33, 1000, 1) != random_token_prompts(7, 33, 1000, 0)


def test_prefix_prompts_share_exactly_the_prefixes():
    prompts = prefix_prompts(25, 10, 64, 8, 5000, 0)
    assert len(prompts) == 25 and all(len(p) == 72 for p in prompts)
    assert prompts[3][:64] == prompts[13][:64] == prompts[23][:64]
    assert len({tuple(p[:64]) for p in prompts}) == 10
    assert len({tuple(p[64:]) for p in prompts}) == 25


def test_synthetic_tokenizer_maps_words_to_ids_one_to_one(tmp_path):
    from transformers import AutoTokenizer

    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 1000, "bos_token_id": 1, "eos_token_id": [2, 3]}
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(config))
    model = build_model_dir(tmp_path / "cfg", tmp_path / "model")
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    ids = random_token_prompts(1, 500, 1000, 3)[0] + [0, 1, 2, 3, 10, 172, 999]
    assert tok(ids_to_text(ids))["input_ids"] == ids  # 't1' is no special token inside 't172'
    assert tok.decode([172, 1]) == "t172 t1"
    assert json.loads((model / "config.json").read_text()) == config


def test_parse_parts_and_rates():
    assert workloads.parse_parts("offline, serve") == ["offline", "serve"]
    assert workloads.parse_parts("all") == list(workloads.PARTS)
    assert workloads.parse_parts("none") == []
    with pytest.raises(ValueError, match="unknown part.*servee"):
        workloads.parse_parts("servee")
    assert workloads.parse_rates("inf,4") == (math.inf, 4.0)
    with pytest.raises(ValueError, match="--rates"):
        workloads.parse_rates("0,4")


def test_parse_offline_and_latency_workloads():
    assert workloads.parse_offline("1000:1024:256") == (workloads.Offline("offline_1024x256", 1000, 1024, 256),)
    assert workloads.parse_latency("1,8:1024:32:2") == workloads.Latency("latency", (1, 8), 1024, 32, 2)
    with pytest.raises(ValueError, match="--offline takes"):
        workloads.parse_offline("1000x1024x256")
    with pytest.raises(ValueError, match="--latency takes"):
        workloads.parse_latency("1:1024:1:2")  # one output token: no decode step to time


def test_served_workloads_scale_with_the_rate():
    served = workloads.served_workloads((math.inf, 4, 16), rate_seconds=30)
    assert [(w.num_prompts, w.request_rate) for w in served] == [(1000, math.inf), (120, 4.0), (480, 16.0)]
    assert workloads.PREFIX.prompt_len == 1024 + 128 <= workloads.MAX_MODEL_LEN - workloads.PREFIX.output_len
    q = workloads.quick(workloads.LATENCY)
    assert q.name == "quick_latency" and q.batch_sizes == (1, 4)


def test_run_step_enforces_the_time_limit(tmp_path):
    deadline = Deadline(100.0)
    quick = run_step(StepRecord("echo", "pagoda"), [sys.executable, "-c", "print('hi')"], {}, tmp_path / "a.log", deadline, 30, 0)
    assert quick.status == "ok" and "hi" in (tmp_path / "a.log").read_text()
    slow = run_step(StepRecord("sleep", "vllm"), [sys.executable, "-c", "import time; time.sleep(30)"], {},
                    tmp_path / "b.log", deadline, 1.0, 0)
    assert slow.status == "timeout" and slow.seconds < 20
    failing = run_step(StepRecord("exit", "vllm"), [sys.executable, "-c", "raise SystemExit(3)"], {}, tmp_path / "c.log",
                       deadline, 30, 0)
    assert failing.status == "failed"


def test_deadline_skips_steps_that_cannot_fit(tmp_path):
    now = [0.0]
    deadline = Deadline(60.0, clock=lambda: now[0])
    now[0] = 50.0
    assert deadline.limit(300) == 10.0
    record = run_step(StepRecord("late", "pagoda"), [sys.executable, "-c", "pass"], {}, tmp_path / "d.log", deadline, 300, 20)
    assert record.status == "skipped" and not (tmp_path / "d.log").exists()


def test_a_server_that_does_not_come_up_says_why(tmp_path):
    """A server that exits and one that never answers: start() is False, with the exit status or the time waited
    (the note on the time only where the time ran out)."""
    exits = Server([sys.executable, "-c", "raise SystemExit(3)"], {}, 8999, tmp_path / "exits.log")
    assert not exits.start(30, " (budget)") and exits.failure == "exited with status 3"
    silent = Server([sys.executable, "-c", "import time; time.sleep(60)"], {}, 8999, tmp_path / "silent.log")
    try:
        assert not silent.start(1, " (budget)") and silent.failure == "not ready within 1 s (budget)"
    finally:
        silent.stop()


# What each engine's benchmark writes (the fields report.py reads; the numbers are made up).
PAGODA_THROUGHPUT = {"pagoda": {"seconds": 40.0, "requests_per_s": 25.0, "tokens_per_s": 12800.0,
                                "output_tokens_per_s": 6400.0}, "roofline": {"compute_floor_s": 10.0}}
PAGODA_LATENCY = {"steps": [{"batch": 1, "step_ms": 6.5, "floor_ms": 5.0}, {"batch": 8, "step_ms": 6.7, "floor_ms": 5.1}]}
VLLM_OFFLINE = {"throughput": {"offline_256x256": {"seconds": 25.0, "requests_per_s": 40.0, "tokens_per_s": 20480.0,
                                                   "output_tokens_per_s": 10240.0}},
                "latency": {"steps": [{"batch": 1, "step_ms": 6.0}, {"batch": 8, "step_ms": 8.0}]}}


def served(throughput: float, ttft: float) -> dict:
    return {"completed": 100, "failed": 0, "request_throughput": throughput, "output_throughput": throughput * 256,
            "p50_ttft_ms": ttft, "p99_itl_ms": 30.0, "ttfts": [0.1] * 100}


def measurements() -> list[dict]:
    return (report.from_pagoda_offline("offline_256x256", PAGODA_THROUGHPUT) + report.from_latency("pagoda", PAGODA_LATENCY)
            + report.from_vllm_offline(VLLM_OFFLINE)
            + report.from_served("serve_inf", "pagoda", "pagoda", served(20.0, 500.0))
            + report.from_served("serve_inf", "pagoda", "vllm", served(25.0, 250.0)))


def by(rows, workload, metric, client=None):
    (match,) = [r for r in rows if r["workload"] == workload and r["metric"] == metric and client in (None, r["client"])]
    return match


def test_side_by_side_ratios_and_advantage():
    rows = report.side_by_side(measurements())
    offline = by(rows, "offline_256x256", "requests_per_s")
    assert (offline["pagoda"], offline["vllm"], offline["ratio"], offline["pagoda_advantage"]) == (25.0, 40.0, 0.625, 0.625)
    b1 = by(rows, "latency_b1", "step_ms")  # lower is better: advantage = vLLM / Pagoda
    assert b1["better"] == "lower" and b1["ratio"] == pytest.approx(6.5 / 6.0) and b1["pagoda_advantage"] == pytest.approx(6.0 / 6.5)
    assert by(rows, "latency_b8", "step_ms")["pagoda_advantage"] == pytest.approx(8.0 / 6.7)
    ttft = by(rows, "serve_inf", "p50_ttft_ms", "pagoda")
    assert ttft["ratio"] == 2.0 and ttft["pagoda_advantage"] == 0.5
    assert by(rows, "serve_inf", "request_throughput")["ratio"] == 0.8
    assert not [r for r in rows if r["metric"] in ("completed", "failed", "floor_ms")]


def test_rows_need_both_engines_and_a_completed_run():
    only_pagoda = report.from_pagoda_offline("offline_1024x128", PAGODA_THROUGHPUT)
    assert report.side_by_side(only_pagoda) == []
    assert report.from_served("w", "vllm", "vllm", {"completed": 0, "request_throughput": 0.0}) == []


def test_merge_runs_later_measurement_wins():
    first = {"date": "d1", "parts": ["offline"], "steps": [{"name": "a"}], "measurements": measurements()}
    redo = report.from_served("serve_inf", "pagoda", "vllm", served(10.0, 250.0))
    second = {"date": "d2", "parts": ["serve"], "steps": [{"name": "b"}], "measurements": redo}
    merged = report.merge_runs([first, second])
    assert [r["date"] for r in merged["runs"]] == ["d1", "d2"] and len(merged["steps"]) == 2
    assert by(merged["rows"], "serve_inf", "request_throughput")["ratio"] == 2.0
    assert len(merged["measurements"]) == len(measurements())


def repeated(engine: str, throughputs: list[float], hit_rates: list[float]) -> list[dict]:
    """One engine's measurements of serve_inf over several server starts (--repeats)."""
    out = []
    for i, (tput, hits) in enumerate(zip(throughputs, hit_rates)):
        (m,) = report.from_served("serve_inf", "pagoda", engine, served(tput, 100.0 * (i + 1)), "matched")
        m["prefix_cache"], m["repeat"] = {"hit_rate": hits, "flagged": hits > 0.05}, i
        out.append(m)
    return out


def test_repeats_count_with_their_medians_and_ranges():
    rows = report.side_by_side(repeated("pagoda", [50.0, 40.0, 46.0], [0.0, 0.0, 0.0])
                               + repeated("vllm", [44.0, 48.0], [0.0, 0.2]))
    tput = by(rows, "serve_inf", "request_throughput")
    assert (tput["pagoda"], tput["vllm"], tput["ratio"]) == (46.0, 46.0, 1.0)  # vLLM's median of two: their mean
    assert tput["repeats"] == {"pagoda": 3, "vllm": 2}
    assert tput["range"] == {"pagoda": [40.0, 50.0], "vllm": [44.0, 48.0]}
    ttft = by(rows, "serve_inf", "p50_ttft_ms")
    assert (ttft["pagoda"], ttft["vllm"]) == (200.0, 150.0) and ttft["pagoda_advantage"] == 0.75
    assert tput["prefix_cache_hit_rate"] == {"pagoda": 0.0, "vllm": 0.2} and tput["cache_flag"]  # any start's hits
    assert "median of 3/2 starts (pagoda 40-50; vllm 44-48)" in report.format_table([tput])
    single = by(report.side_by_side(measurements()), "serve_inf", "request_throughput")
    assert "repeats" not in single and "range" not in single


def test_a_later_run_replaces_every_repeat_of_an_earlier_one():
    earlier = {"date": "d1", "measurements": repeated("pagoda", [50.0, 40.0, 46.0], [0.0] * 3)
               + repeated("vllm", [44.0, 48.0], [0.0] * 2)}
    later = {"date": "d2", "measurements": repeated("pagoda", [30.0], [0.0])}
    merged = report.merge_runs([earlier, later])
    assert sorted(m["engine"] for m in merged["measurements"]) == ["pagoda", "vllm", "vllm"]
    tput = by(merged["rows"], "serve_inf", "request_throughput")
    assert (tput["pagoda"], tput["vllm"], tput["repeats"]) == (30.0, 46.0, {"pagoda": 1, "vllm": 2})


def test_chart_draws_each_headline_metric(tmp_path):
    rows = report.side_by_side(measurements())
    path = report.chart(rows, tmp_path / "peers.png", "test")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report.chart([], tmp_path / "none.png", "test") is None


def test_vllm_engine_flags_become_typed_kwargs():
    import argparse

    import vllm_offline

    args = argparse.Namespace(model="/m", limits="matched", engine_flag=[
        "--attention-backend=TRITON_ATTN", "--enforce-eager", "--max-num-seqs=128", "--gpu-memory-utilization=0.8"])
    kwargs = vllm_offline.engine_kwargs(args)
    assert kwargs["attention_backend"] == "TRITON_ATTN" and kwargs["enforce_eager"] is True
    assert kwargs["max_num_seqs"] == 128 and kwargs["gpu_memory_utilization"] == 0.8
    assert kwargs["max_num_batched_tokens"] == 8192 and kwargs["skip_tokenizer_init"] is True
    assert kwargs["max_model_len"] == workloads.MAX_MODEL_LEN and kwargs["load_format"] == "dummy"


def test_pagoda_command_lines_parse_with_the_same_settings_as_vllm(tmp_path):
    import engines
    from pagoda.cli.main import build_parser
    from pagoda.plugins import get_plugin_manager

    # "torch" stands in for "triton" (the choice list is what the installed plugins register)
    s = engines.Settings(model_dir=tmp_path, pagoda_flags=["--attention-backend", "torch"])
    served = workloads.served_workloads((8,))[0]
    commands = [engines.pagoda_offline_cmd(s, workloads.OFFLINE[1], tmp_path / "o.json"),
                engines.pagoda_latency_cmd(s, workloads.LATENCY, tmp_path / "l.json"),
                engines.server_cmd("pagoda", s, 8100),
                engines.pagoda_client_cmd("http://127.0.0.1:8100", served, tmp_path / "p.jsonl", tmp_path / "c.json")]
    parser = build_parser(get_plugin_manager())
    offline, latency, server, client = (parser.parse_args(cmd[1:]) for cmd in commands)
    for args in (offline, latency, server):
        assert (args.max_model_len, args.gpu_memory_utilization, args.load_format, args.seed) == (
            workloads.MAX_MODEL_LEN, workloads.GPU_MEMORY_UTILIZATION, "dummy", workloads.SEED)
    assert (offline.num_prompts, offline.input_len, offline.output_len) == (1000, 1024, 128)
    assert latency.batch_sizes == "1,8,64" and server.port == 8100
    assert (client.request_rate, client.num_prompts, client.ignore_eos) == (8.0, served.num_prompts, True)
    assert (server.max_num_seqs, server.max_num_batched_tokens) == (256, 8192)  # matched limits: explicit on both
    assert (offline.max_num_seqs, offline.max_num_batched_tokens) == (256, 8192)
    vllm_server = engines.server_cmd("vllm", engines.Settings(model_dir=tmp_path), 8200)
    for flag, value in (("--max-model-len", str(workloads.MAX_MODEL_LEN)), ("--max-num-seqs", "256"),
                        ("--max-num-batched-tokens", "8192"),
                        ("--gpu-memory-utilization", str(workloads.GPU_MEMORY_UTILIZATION))):
        assert vllm_server[vllm_server.index(flag) + 1] == value
    own = engines.Settings(model_dir=tmp_path, limits="own")
    for engine in ("pagoda", "vllm"):
        assert "--max-num-seqs" not in engines.server_cmd(engine, own, 8200)


def test_pagoda_client_takes_mixed_lengths_from_the_file(tmp_path):
    import engines
    import prompts
    from pagoda.bench.serve import check_args, make_inputs
    from pagoda.cli.main import build_parser
    from pagoda.plugins import get_plugin_manager

    mixed = workloads.mixed_workloads((8,))[0]
    jsonl = prompts.write_mixed_prompts_file(tmp_path / "m.jsonl", [([1, 2, 3], 5), ([4], 17)])
    cmd = engines.pagoda_client_cmd("http://127.0.0.1:8100", mixed, jsonl, tmp_path / "c.json")
    args = build_parser(get_plugin_manager()).parse_args(cmd[1:])
    check_args(args)  # the workload's output_len (0) must not reach the client as a flag
    lengths = [r.output_len for r in make_inputs(args, None, "", "m")]
    assert lengths[:2] == [5, 17] and len(lengths) == mixed.num_prompts
