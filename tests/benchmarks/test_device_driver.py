"""scripts/device/run.sh, the device driver, on a CPU: its suites and parts, its refusals, its bookkeeping
(scripts/device/collect.py), and the e2e suite's offline parts end to end on a tiny dummy config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "scripts" / "device" / "run.sh"
COLLECT = ROOT / "scripts" / "device" / "collect.py"
SUITES = ["deepseek", "e2e", "gpu-tests", "kernels", "kvoffload", "multimodal", "peers", "quant", "spec", "tp"]


def driver(*args: str, env: dict | None = None, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(RUN), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHON": sys.executable, "INSTALL": "0", **(env or {})})


def test_list_names_every_suite_with_its_parts() -> None:
    done = driver("--list")
    assert done.returncode == 0
    names = [line.split()[0] for line in done.stdout.splitlines() if not line.startswith(" ")]
    assert names == SUITES
    assert "parts: throughput latency serve guided lora trace steps kernels (default: throughput latency serve)" in done.stdout


def test_dry_run_prints_the_commands_and_writes_nothing(tmp_path) -> None:
    done = driver("--dry-run", "e2e:latency", "spec:ngram", env={"OUT": str(tmp_path), "MODEL": "/m"})
    assert done.returncode == 0, done.stderr
    assert "bench latency /m --load-format dummy --max-model-len 2048" in done.stdout
    assert "--speculative-config" in done.stdout and "throughput_1024x128" not in done.stdout
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("spec, message", [
    ("e2f", "unknown suite 'e2f'; suites: deepseek e2e gpu-tests kernels kvoffload multimodal peers quant spec tp"),
    ("tp:8b,9b", "suite tp has no part '9b'; its parts: tests 8b 70b serve"),
])
def test_unknown_suites_and_parts_are_named(spec, message) -> None:
    done = driver("--dry-run", spec)
    assert done.returncode == 2 and message in done.stderr


def collect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(COLLECT), *map(str, args)], capture_output=True, text=True, timeout=30)


def test_results_hold_each_step_with_its_headline(tmp_path) -> None:
    work, out = tmp_path / "work", tmp_path / "suite"
    work.mkdir(), out.mkdir()
    (out / "env.txt").write_text("suite: e2e\ngpu: 0, NVIDIA H200, 143771 MiB, 570.1\n")
    (work / "latency.json").write_text(json.dumps({"steps": [{"batch": 1, "step_ms": 4.5, "ratio_to_floor": 1.25}]}))
    (work / "tests.xml").write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="t.test_a" name="test_ok"/><testcase classname="t.test_a" name="test_bad"><failure/></testcase>'
        '<testcase classname="t.test_a" name="test_skip"><skipped/></testcase></testsuite></testsuites>')
    (work / "server_start.log").write_text("starting\nthe server did not start in 300 s\n")
    for name, code in (("latency", 0), ("tests", 1), ("server_start", 1), ("late", "skipped")):
        assert collect("record", work, name, code, 3, "--", "cmd", name).returncode == 0
    done = collect("results", work, "e2e", out / "results.json")
    assert done.returncode == 1  # a step failed
    result = json.loads((out / "results.json").read_text())
    assert result["env"] == {"suite": "e2e", "gpu": "0, NVIDIA H200, 143771 MiB, 570.1"}
    steps = {s["name"]: s for s in result["steps"]}
    assert steps["latency"]["headline"] == "b1=4.50ms(1.25x floor)" and steps["latency"]["cmd"] == ["cmd", "latency"]
    assert steps["tests"]["headline"] == "1 passed, 1 failed, 1 skipped (t.test_a::test_bad)"
    assert steps["server_start"]["headline"] == "the server did not start in 300 s"
    assert steps["late"]["exit"] == "skipped" and "late: skipped (time budget)" in done.stdout


@pytest.mark.slow
def test_e2e_offline_parts_on_a_tiny_config(tmp_path) -> None:
    """throughput and latency through `pagoda bench`, as the GPU machine runs them, in the driver's layout."""
    import transformers

    model = tmp_path / "tiny"
    transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                             architectures=["LlamaForCausalLM"]).save_pretrained(model)
    done = driver("--quick", "e2e:throughput,latency", env={"OUT": str(tmp_path / "out"), "MODEL": str(model)},
                  timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    suite = tmp_path / "out" / "e2e"
    assert sorted(p.name for p in suite.iterdir()) == ["env.txt", "logs.tgz", "results.json"]
    env = (suite / "env.txt").read_text()
    assert "suite: e2e" in env and "gpu: none" in env and "quick: 1" in env and f"MODEL={model}" in env
    steps = json.loads((suite / "results.json").read_text())["steps"]
    assert [s["name"] for s in steps] == ["throughput_256x256", "throughput_1024x128", "latency"]
    assert all(s["exit"] == 0 for s in steps)
    assert steps[0]["result"]["pagoda"]["requests_per_s"] > 0 and "pagoda_requests_per_s=" in steps[0]["headline"]
    assert [row["batch"] for row in steps[2]["result"]["steps"]] == [1, 2]
    with tarfile.open(suite / "logs.tgz") as logs:
        assert {"./latency.log", "./latency.json", "./steps.jsonl"} <= set(logs.getnames())
