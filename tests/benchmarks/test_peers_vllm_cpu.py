"""The vLLM side of the peers parts `lora` and `vlm`, end to end on CPU with vLLM's CPU build, beside Pagoda's side
on the same inputs. Not part of CI (vLLM is not installed there): it runs only when VLLM_CPU_PYTHON names a
python with vLLM (its CPU build, 0.32 when written), e.g.

    VLLM_CPU_PYTHON=/work/vllm-cpu-venv/bin/python python -m pytest -q tests/benchmarks/test_peers_vllm_cpu.py

The command lines are the harness's own (lora_part / vlm_part), with that python for vLLM's scripts; tiny models
(dummy weights, head size 64: vLLM's CPU attention takes no smaller one) and the quick workloads. Where that
python has no torchvision (no CPU build of it for every torch), vLLM's Qwen2.5-VL files, which import it at their
top, get a stand-in package and transformers' PIL image processors (the GPU machine has torchvision)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks" / "peers"), str(ROOT / "tests" / "multimodal")]

import engines  # noqa: E402
import lora_part  # noqa: E402
import report  # noqa: E402
import vlm_part  # noqa: E402

VLLM_PYTHON = os.environ.get("VLLM_CPU_PYTHON", "")
pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="VLLM_CPU_PYTHON (a python with vLLM's CPU build) not set")

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 1000, "hidden_size": 256,
              "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "torch_dtype": "float32"}
VLLM_CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
PAGODA_FLAGS = ["--dtype", "float32", "--attention-backend", "torch"]
STAND_IN = '''"""torchvision stand-in for the CPU check: importable, every name a placeholder."""
class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls
class _Placeholder(metaclass=_Meta):
    pass
def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    return _Placeholder
'''
SITECUSTOMIZE = '''try:
    import transformers.utils as _utils
    import transformers.utils.import_utils as _import_utils
except ImportError:
    pass
else:  # transformers sees no torchvision: its PIL image processors serve
    for _mod in (_utils, _import_utils):
        _mod.is_torchvision_available = _mod.is_torchvision_v2_available = lambda: False
'''
STAND_IN_MODULES = ("__init__", "transforms/__init__", "transforms/functional", "transforms/v2/__init__",
                    "transforms/v2/functional", "transforms/v2/_utils", "io/__init__", "ops", "utils")


def vllm_site(tmp: Path) -> str:
    """What goes on vLLM's PYTHONPATH: nothing, or the torchvision stand-in where its python lacks torchvision."""
    probe = subprocess.run([VLLM_PYTHON, "-c", "import torchvision"], capture_output=True)
    if probe.returncode == 0:
        return ""
    for name in STAND_IN_MODULES:
        path = tmp / "torchvision" / f"{name}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STAND_IN)
    (tmp / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return str(tmp)


def run(cmd: list[str], env: dict, log: Path, timeout: int = 900) -> None:
    with open(log, "wb") as out:
        done = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    assert done.returncode == 0, log.read_text()[-4000:]


def sides(tmp: Path, model_dir: Path) -> tuple[engines.Settings, engines.Settings]:
    pagoda = engines.Settings(model_dir=model_dir, pagoda_flags=PAGODA_FLAGS)
    vllm = engines.Settings(model_dir=model_dir, python=VLLM_PYTHON, vllm_site=vllm_site(tmp / "site"),
                            vllm_flags=["--dtype=float32"])
    return pagoda, vllm


def test_lora_both_engines_on_the_same_adapters(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(TINY_LLAMA))
    w = lora_part.LORA.quick()
    adapters = tmp_path / "adapters"
    lora_part.write_adapters(tmp_path / "cfg", adapters, w)
    pagoda, vllm = sides(tmp_path, tmp_path / "cfg")
    run(lora_part.pagoda_cmd(pagoda, w, adapters, tmp_path / "pagoda.json"), engines.pagoda_env(), tmp_path / "p.log")
    raw = {}
    for phase in ("base", "lora"):
        run(lora_part.vllm_cmd(vllm, w, phase, adapters, tmp_path / f"vllm_{phase}.json"),
            {**engines.vllm_env(vllm), **VLLM_CPU_ENV}, tmp_path / f"v_{phase}.log")
        raw.update(json.loads((tmp_path / f"vllm_{phase}.json").read_text()))
    assert raw["adapters_held"] == list(range(1, max(w.adapter_counts) + 1))  # every adapter loaded
    assert raw["engine_kwargs"]["max_cpu_loras"] == 10 and raw["scheduler"]["max_num_seqs"] == 256
    rows = report.side_by_side(lora_part.measurements("pagoda", json.loads((tmp_path / "pagoda.json").read_text()),
                                                      w, "matched") + lora_part.measurements("vllm", raw, w, "matched"))
    metrics = {(r["workload"].removeprefix(w.name + "_"), r["metric"]) for r in rows}
    for run_name in ("engine_base", "adapters_1", "adapters_2", "adapters_10"):
        assert {(run_name, "requests_per_s"), (run_name, "vs_own_base")} <= metrics
    assert {("step_b4_adapter", "step_vs_own_base"), ("base", "requests_per_s")} <= metrics
    assert all(r["pagoda"] > 0 and r["vllm"] > 0 for r in rows)
    print(report.format_table(rows))


def tiny_qwen2_5_vl(folder: Path) -> Path:
    """The tiny Qwen2.5-VL of the parity tests with a head size of 64."""
    from tiny_vlm import FAMILIES

    config, _, images, hf_class = FAMILIES["qwen2_5_vl"]()
    config.architectures = [hf_class.__name__]
    text = config.text_config
    text.hidden_size, text.num_attention_heads, text.num_key_value_heads, text.max_position_embeddings = 128, 2, 1, 4096
    text.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]}
    config.vision_config.out_hidden_size = 128
    config.save_pretrained(folder)
    images.save_pretrained(folder)
    return folder


def test_vlm_both_engines_on_the_same_requests(tmp_path):
    model = vlm_part.build_model_dir(tiny_qwen2_5_vl(tmp_path / "cfg"), tmp_path / "model")
    w = vlm_part.VLM.quick()
    pagoda, vllm = sides(tmp_path, model)
    run(vlm_part.pagoda_cmd(pagoda, w, model, tmp_path / "pagoda.json"), engines.pagoda_env(), tmp_path / "p.log")
    run(vlm_part.vllm_cmd(vllm, w, model, tmp_path / "vllm.json"), {**engines.vllm_env(vllm), **VLLM_CPU_ENV},
        tmp_path / "v.log")
    raws = {e: json.loads((tmp_path / f"{e}.json").read_text()) for e in ("pagoda", "vllm")}
    # 16 words, the vision markers, 112x112 pixels in 2x2-merged 14-pixel patches
    assert raws["pagoda"]["prompt_tokens"] == raws["vllm"]["prompt_tokens"] == 16 + 2 + (112 // 28) ** 2
    assert raws["vllm"]["output_tokens"] == w.num_prompts * w.output_len
    rows = report.side_by_side([m for e, raw in raws.items() for m in vlm_part.measurements(e, raw, w, "matched")])
    assert {r["metric"] for r in rows} == set(vlm_part.METRICS)
    print(report.format_table(rows))
