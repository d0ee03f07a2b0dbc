"""benchmarks/peers parts `lora` and `vlm` on CPU: both engines' command lines carry the same workload and limits,
the adapters are written once in PEFT's layout, both sides build identical image requests, and every figure
becomes a row both ways (Pagoda / vLLM, and each engine against its own base). vLLM itself runs in
test_peers_vllm_cpu.py (outside CI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "benchmarks" / "peers"
sys.path[:0] = [str(PEERS), str(ROOT / "benchmarks"), str(ROOT / "tests" / "multimodal")]

import engines  # noqa: E402
import lora_part  # noqa: E402
import lora_throughput  # noqa: E402
import multimodal_throughput  # noqa: E402
import report  # noqa: E402
import vlm_part  # noqa: E402
import vllm_lora  # noqa: E402
import vllm_vlm  # noqa: E402
import workloads  # noqa: E402

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
              "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}


def test_lora_and_vlm_are_parts():
    assert workloads.parse_parts("lora,vlm") == ["lora", "vlm"]
    assert {"lora", "vlm"} <= set(workloads.parse_parts("all"))
    suite = (ROOT / "scripts/device/suites/peers.sh").read_text()
    assert 'ALL_PARTS="offline serve serve_vllm_client mixed mixed_vllm_client prefix lora vlm"' in suite


@pytest.mark.parametrize("limits", ["matched", "own"])
@pytest.mark.parametrize("quick", [False, True])
def test_lora_commands_carry_the_same_workload_and_limits(tmp_path, limits, quick):
    s = engines.Settings(model_dir=tmp_path, limits=limits, vllm_flags=["--enforce-eager"])
    w = lora_part.LORA.quick() if quick else lora_part.LORA
    pagoda = lora_throughput.parse_args(lora_part.pagoda_cmd(s, w, tmp_path / "ad", tmp_path / "p.json")[2:])
    assert (pagoda.max_model_len, pagoda.gpu_memory_utilization, pagoda.load_format, pagoda.seed) == (
        workloads.MAX_MODEL_LEN, workloads.GPU_MEMORY_UTILIZATION, "dummy", workloads.SEED)
    for phase in ("base", "lora"):
        vllm = vllm_lora.parse_args(lora_part.vllm_cmd(s, w, phase, tmp_path / "ad", tmp_path / "v.json")[2:])
        kwargs = vllm_lora.lora_kwargs(vllm)
        for name in ("num_prompts", "input_len", "output_len", "rank", "adapter_counts", "batch_sizes",
                     "warmup_prompts", "warmup_output_len", "adapter_dir"):
            assert getattr(pagoda, name) == getattr(vllm, name), name
        assert (kwargs["max_model_len"], kwargs["gpu_memory_utilization"], kwargs["load_format"], kwargs["seed"]) == (
            pagoda.max_model_len, pagoda.gpu_memory_utilization, "dummy", pagoda.seed)
        if limits == "matched":  # explicit on both
            assert kwargs["max_num_seqs"] == pagoda.max_num_seqs == 256
            assert kwargs["max_num_batched_tokens"] == pagoda.max_num_batched_tokens == 8192
        else:  # each at its own defaults
            assert "max_num_seqs" not in kwargs and "--max-num-seqs" not in lora_part.pagoda_cmd(s, w, tmp_path, tmp_path)
        assert ("enable_lora" in kwargs) == (phase == "lora") and kwargs["enforce_eager"] is True
    assert pagoda.warmup_prompts == (256 if limits == "matched" else engines.PAGODA_DEFAULT_MAX_NUM_SEQS)
    # the LoRA engines: the same slots, rank and host copies
    assert kwargs["max_loras"] == lora_throughput.lora_slots(pagoda.max_loras, pagoda.adapter_counts) == w.max_loras
    assert kwargs["max_lora_rank"] == pagoda.max_lora_rank == 16
    assert kwargs["max_cpu_loras"] == max(w.adapter_counts)  # Pagoda's: every adapter (lora_throughput.run_phases)
    if not quick:
        assert (pagoda.num_prompts, pagoda.input_len, pagoda.output_len, pagoda.adapter_counts) == (1000, 256, 256, [1, 8, 32])
        assert kwargs["max_loras"] == 8 and kwargs["max_cpu_loras"] == 32


def test_adapters_are_written_once_in_peft_layout(tmp_path):
    from safetensors import safe_open

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(TINY_LLAMA))
    folders = lora_part.write_adapters(tmp_path / "cfg", tmp_path / "ad", lora_part.LORA.quick())
    assert [f.name for f in folders] == [f"a{i}" for i in range(10)]
    config = json.loads((folders[3] / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 16 and len(config["target_modules"]) == 7
    with safe_open(str(folders[3] / "adapter_model.safetensors"), "pt") as f:
        keys = set(f.keys())
        a = f.get_tensor("base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight")
        b = f.get_tensor("base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight")
    assert len(keys) == 2 * 7 * 2 and a.shape == (16, 64) and b.shape == (32, 16)
    stamp = [f.stat().st_mtime_ns for f in folders]
    again = lora_part.write_adapters(tmp_path / "cfg", tmp_path / "ad", lora_part.LORA.quick())
    assert again == folders and [f.stat().st_mtime_ns for f in folders] == stamp  # kept, not written again


def fake_raw(base: float, scale: float, counts: tuple[int, ...] = (1, 8, 32)) -> dict:
    """Raw LoRA results as both scripts write them (made-up figures; JSON keys of step sizes are strings)."""
    return {"base_req_per_s": base, "lora_engine_base_req_per_s": base * 0.95,
            **{f"adapters_{n}_req_per_s": base * scale / (1 + n / 100) for n in counts},
            "base_step_ms": {"1": 6.0, "64": 10.0}, "one_adapter_step_ms": {"1": 7.5, "64": 11.0}}


def test_lora_rows_both_ways():
    w = lora_part.LORA
    rows = report.side_by_side(lora_part.measurements("pagoda", fake_raw(50.0, 0.8), w, "matched")
                               + lora_part.measurements("vllm", fake_raw(40.0, 0.9), w, "matched"))
    by = {(r["workload"], r["metric"]): r for r in rows}
    eight = by[(f"{w.name}_adapters_8", "requests_per_s")]
    assert eight["pagoda"] == pytest.approx(50 * 0.8 / 1.08) and eight["ratio"] == pytest.approx(50 * 0.8 / (40 * 0.9))
    own = by[(f"{w.name}_adapters_8", "vs_own_base")]
    assert (own["pagoda"], own["vllm"]) == (pytest.approx(0.8 / 1.08), pytest.approx(0.9 / 1.08))
    step = by[(f"{w.name}_step_b1_adapter", "step_vs_own_base")]
    assert step["better"] == "lower" and step["pagoda"] == step["vllm"] == pytest.approx(1.25)
    assert by[(f"{w.name}_base", "requests_per_s")]["ratio"] == 1.25
    assert {m for _, m in by} == {"requests_per_s", "vs_own_base", "step_ms", "step_vs_own_base"}
    assert len(rows) == 1 + 4 * 2 + 2 * (1 + 2)  # base; 4 runs x 2 metrics; per batch: base step, adapter step x 2


def test_lora_rows_need_a_finished_figure_on_both_sides():
    partial = {"base_req_per_s": 40.0}  # vLLM's lora phase timed out before its first figure
    rows = report.side_by_side(lora_part.measurements("pagoda", fake_raw(50.0, 0.8), lora_part.LORA, "matched")
                               + lora_part.measurements("vllm", partial, lora_part.LORA, "matched"))
    assert [(r["workload"], r["metric"]) for r in rows] == [(f"{lora_part.LORA.name}_base", "requests_per_s")]


def save_tiny(family: str, folder: Path) -> Path:
    from tiny_vlm import FAMILIES

    config, _, images, hf_class = FAMILIES[family]()
    config.architectures = [hf_class.__name__]
    config.save_pretrained(folder)
    images.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("family", ["qwen2_5_vl", "llava", "gemma3"])
def test_vlm_requests_are_the_same_on_both_sides_and_hold_pagodas_placeholder(tmp_path, family):
    from transformers import AutoConfig, AutoTokenizer

    from pagoda.models import model_class

    model = vlm_part.build_model_dir(save_tiny(family, tmp_path / "cfg"), tmp_path / "model")
    config = json.loads((model / "config.json").read_text())
    first, again = (multimodal_throughput.image_requests(config, 3, 5, 28, seed=0) for _ in range(2))
    assert [r["prompt"] for r in first] == [r["prompt"] for r in again]
    assert [r["multi_modal_data"]["image"].tobytes() for r in first] == [r["multi_modal_data"]["image"].tobytes() for r in again]
    assert first[0]["prompt"] != first[1]["prompt"]
    assert multimodal_throughput.image_requests(config, 1, 5, 28, seed=1)[0]["prompt"] != first[0]["prompt"]
    hf_config, tok = AutoConfig.from_pretrained(model), AutoTokenizer.from_pretrained(model)
    cls = model_class(hf_config.architectures[0])
    expected = cls.image_placeholder(hf_config, tok)
    if family == "qwen2_5_vl":  # the chat template's markers around the image token
        expected = "<|vision_start|>" + expected + "<|vision_end|>"
    marker = multimodal_throughput.placeholder(config)
    assert marker == expected and first[0]["prompt"].endswith(" " + marker)
    ids = tok(first[0]["prompt"], add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 + len(tok(marker, add_special_tokens=False)["input_ids"])
    assert set(ids[5:]) <= set(multimodal_throughput.special_ids(config).values())


def test_vlm_commands_carry_the_same_workload_and_limits(tmp_path):
    s = engines.Settings(model_dir=tmp_path / "llama", vllm_flags=["--enforce-eager"])
    pagoda = multimodal_throughput.parse_args(vlm_part.pagoda_cmd(s, vlm_part.VLM, tmp_path / "m", tmp_path / "p.json")[2:])
    vllm = vllm_vlm.parse_args(vlm_part.vllm_cmd(s, vlm_part.VLM, tmp_path / "m", tmp_path / "v.json")[2:])
    kwargs = vllm_vlm.vlm_kwargs(vllm)
    for name in ("num_prompts", "input_len", "output_len", "image_size"):
        assert getattr(pagoda, name) == getattr(vllm, name), name
    assert (pagoda.num_prompts, pagoda.input_len, pagoda.output_len, pagoda.image_size) == (500, 64, 128, 448)
    assert pagoda.model == vllm.model == str(tmp_path / "m") and pagoda.prepared
    assert pagoda.max_model_len == kwargs["max_model_len"] == vlm_part.VLM_MAX_MODEL_LEN
    assert (pagoda.max_num_seqs, pagoda.max_num_batched_tokens) == (kwargs["max_num_seqs"], kwargs["max_num_batched_tokens"])
    assert (pagoda.gpu_memory_utilization, pagoda.seed) == (kwargs["gpu_memory_utilization"], kwargs["seed"])
    assert kwargs["skip_tokenizer_init"] is False and kwargs["limit_mm_per_prompt"] == {"image": 1, "video": 0}
    assert kwargs["enforce_eager"] is True and kwargs["load_format"] == "dummy"


def test_vlm_rows_both_ways():
    raw = {"requests_per_s": 10.0, "output_tokens_per_s": 1280.0, "tokens_per_s": 4500.0, "prompt_tokens": 322}
    w = vlm_part.VLM
    rows = report.side_by_side(vlm_part.measurements("pagoda", raw, w, "matched")
                               + vlm_part.measurements("vllm", {**raw, "requests_per_s": 8.0}, w, "matched"))
    by = {r["metric"]: r for r in rows}
    assert by["requests_per_s"]["pagoda_advantage"] == 1.25 and by["prompt_tokens"]["ratio"] == 1.0
    assert vlm_part.measurements("vllm", {}, w, "matched") == []


def fake_result(cmd: list[str], engine: str) -> dict:
    """What each script would write for ``cmd`` (made-up figures, the keys the real ones write)."""
    if "--image-size" in cmd:
        return {"requests_per_s": 10.0 if engine == "pagoda" else 8.0, "prompt_tokens": 34}
    if engine == "pagoda" or "lora" in cmd[cmd.index("--phase") + 1]:
        return {k: v for k, v in fake_raw(50.0 if engine == "pagoda" else 40.0, 0.8, (1, 2, 10)).items()
                if engine == "pagoda" or not k.startswith("base")}
    return {k: v for k, v in fake_raw(40.0, 0.8, (1, 2, 10)).items() if k.startswith("base")}


def test_run_py_runs_both_parts_and_keeps_every_figure(tmp_path, monkeypatch):
    import run as run_py
    from steps import StepRecord

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(TINY_LLAMA))
    args = run_py.parse_args(["--parts", "lora,vlm", "--quick", "--config", str(tmp_path / "cfg"), "--work-dir",
                              str(tmp_path / "work"), "--vlm-config", str(save_tiny("qwen2_5_vl", tmp_path / "vlm"))])
    r = run_py.Run(args)
    commands = []

    def fake_step(name, engine, cmd, cap_s, min_s=20.0, runs_in=None):
        commands.append((name, engine, cmd))
        result = Path(cmd[cmd.index("--result-file") + 1])
        result.write_text(json.dumps(fake_result(cmd, engine)))
        record = StepRecord(name, engine, status="ok")
        r.records.append(record)
        return record

    monkeypatch.setattr(r, "step", fake_step)
    r.execute(run_py.parse_parts(args.parts))
    w = lora_part.LORA.quick()
    assert [(n, e) for n, e, _ in commands] == [(w.name, "pagoda"), (f"{w.name}_base", "vllm"), (f"{w.name}_lora", "vllm"),
                                                (vlm_part.VLM.quick().name, "pagoda"), (vlm_part.VLM.quick().name, "vllm")]
    adapter_dirs = {cmd[cmd.index("--adapter-dir") + 1] for _, _, cmd in commands[:3]}
    assert adapter_dirs == {str(tmp_path / "work" / "lora_adapters")}
    assert len(list((tmp_path / "work" / "lora_adapters").glob("a*/adapter_model.safetensors"))) == 10
    assert (tmp_path / "work" / "vlm_model" / "tokenizer.json").exists()
    path = run_py.write_outputs(r, ["lora", "vlm"], tmp_path / "out", "t")
    rows = json.loads(path.read_text())["rows"]
    assert {(r["workload"], r["metric"]) for r in rows} >= {(f"{w.name}_adapters_10", "vs_own_base"),
                                                            (vlm_part.VLM.quick().name, "requests_per_s")}
    assert all(r["pagoda"] and r["vllm"] for r in rows)


def test_an_interrupted_run_writes_what_finished(tmp_path, monkeypatch):
    """The device driver stops a step at its limit with SIGINT: run.py still writes the measurements made."""
    import run as run_py

    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(TINY_LLAMA))
    done = {"workload": "mixed_sharegpt_like_inf", "client": "pagoda", "engine": "pagoda", "limits": "matched",
            "metrics": {"request_throughput": 9.0}}

    def execute(self, parts):
        self.measurements.append(done)
        raise KeyboardInterrupt

    monkeypatch.setattr(run_py.Run, "execute", execute)
    try:
        code = run_py.main(["--parts", "mixed", "--config", str(tmp_path / "cfg"), "--work-dir",
                            str(tmp_path / "work"), "--out", str(tmp_path / "out"), "--tag", "run"])
    except KeyboardInterrupt:
        pytest.fail("run.py let the interrupt through and wrote nothing")
    written = json.loads((tmp_path / "out" / "peers_run.json").read_text())
    assert code == 1 and written["measurements"] == [done]
    assert written["steps"][-1]["status"] == "timeout" and written["parts"] == ["mixed"]
