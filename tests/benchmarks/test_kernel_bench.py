"""benchmarks/kernel_bench: the result schema's ratios, the command line, and the families with a CPU path run
end to end on small shapes (their figures mean nothing on a CPU; their checks and their JSON do)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.kernel_bench import FAMILIES  # noqa: E402
from benchmarks.kernel_bench.__main__ import main  # noqa: E402
from benchmarks.kernel_bench.report import make_row  # noqa: E402
from benchmarks.kernel_bench.timing import Rates  # noqa: E402


def test_row_ratios_against_the_peer_and_the_floor() -> None:
    row = make_row({"m": 1}, {"peer": 20.0, "fast": 10.0, "slow": 40.0}, peer="peer", floor_us=5.0, extra=3)
    assert row["vs_peer"] == {"fast": 2.0, "slow": 0.5}
    assert row["of_floor"] == {"peer": 0.25, "fast": 0.5, "slow": 0.125}
    assert row["case"] == {"m": 1} and row["extra"] == 3 and row["floor_us"] == 5.0
    assert "vs_peer" not in make_row({}, {"a": 1.0}) and "of_floor" not in make_row({}, {"a": 1.0})


def test_a_peer_that_was_not_timed_is_named() -> None:
    with pytest.raises(ValueError, match="peer 'cublas' was not timed .*gemv"):
        make_row({}, {"gemv": 1.0}, peer="cublas")


def test_floor_is_the_slower_of_bytes_and_flops() -> None:
    rates = Rates(copy_gbs=1000.0, matmul_tflops=100.0)  # 1 GB/ms and 0.1 TFLOP/ms
    assert rates.floor_us(nbytes=2e9) == pytest.approx(2000.0)
    assert rates.floor_us(flops=1e12) == pytest.approx(10_000.0)
    assert rates.floor_us(nbytes=2e9, flops=1e12) == pytest.approx(10_000.0)


def test_list_names_every_family(capsys) -> None:
    assert main(["--list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == list(FAMILIES)


def test_unknown_family_is_refused_with_the_choices(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["gemmm"])
    assert exc.value.code == 2 and "invalid choice: 'gemmm'" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message given without a GPU")
@pytest.mark.parametrize("name", ["gemv", "awq", "fp8"])
def test_gpu_families_say_what_they_need(name, capsys) -> None:
    assert main([name]) == 2
    assert f"error: {name}: needs a CUDA GPU" in capsys.readouterr().err


def _result(path: Path, name: str) -> dict:
    result = json.loads(path.read_text())
    assert result["schema"] == 1 and result["benchmark"] == name
    assert set(result["env"]) == {"device", "torch", "triton", "commit", "copy_gbs", "matmul_tflops"}
    for row in result["rows"]:
        for impl, ratio in row.get("vs_peer", {}).items():
            assert ratio == pytest.approx(row["us"][row["peer"]] / row["us"][impl], rel=1e-3)
    return result


def test_sampler_small(tmp_path) -> None:
    """argmax equals torch.argmax (the benchmark raises otherwise); every sampling mode is timed."""
    assert main(["sampler", "--small", "--out", str(tmp_path / "s.json")]) == 0
    rows = _result(tmp_path / "s.json", "sampler")["rows"]
    assert [(r["case"]["op"], r["case"]["rows"]) for r in rows] == [("argmax", 1), ("argmax", 4), ("sampler", 1),
                                                                      ("sampler", 4)]
    assert set(rows[-1]["us"]) == {"greedy", "top_p", "top_k_top_p"} and rows[-1]["peer"] == "greedy"


def test_attention_small_torch_backend(tmp_path) -> None:
    assert main(["attention", "--small", "--backends", "torch", "--out", str(tmp_path / "a.json")]) == 0
    rows = _result(tmp_path / "a.json", "attention")["rows"]
    assert [r["case"]["part"] for r in rows] == ["prefill"] * 2 + ["decode"] * 4 + ["verify"]
    prefill = rows[0]
    assert prefill["peer"] == "sdpa" and set(prefill["us"]) == {"torch", "sdpa"}
    flops = 4.0 * 4 * 4 * 64 * 32 * 33 / 2  # batch 4 of 32-token prompts, 4 heads of 64
    assert prefill["tflops"]["torch"] == pytest.approx(flops / prefill["us"]["torch"] / 1e6, abs=0.06)


def test_attention_unknown_part_is_named(capsys) -> None:
    assert main(["attention", "--small", "--parts", "prefill,decoding"]) == 2
    assert "unknown part(s) decoding; parts: prefill, decode, verify" in capsys.readouterr().err


def test_moe_small_under_the_triton_interpreter(tmp_path) -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "moe.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.kernel_bench", "moe", "--small", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _result(out, "moe")["rows"]
    assert [r["case"]["tokens"] for r in rows] == [1, 4]
    for row in rows:
        assert row["peer"] == "reference" and row["max_rel_err"] < 1e-4  # float32 on a CPU
        assert 1 <= row["experts_hit"] <= 8


def test_lora_small_under_the_triton_interpreter(tmp_path) -> None:
    """The LoRA family: a row per adapter count, the adds checked against the torch reference, a tile variant
    timed beside the default."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = tmp_path / "lora.json"
    done = subprocess.run([sys.executable, "-m", "benchmarks.kernel_bench", "lora", "--small", "--batches", "20",
                           "--tiles", "decode_k=64+split_k=64", "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _result(out, "lora")["rows"]
    assert [(r["case"]["rows"], r["case"]["adapters"]) for r in rows] == [(20, 1), (20, 8)]
    for row in rows:
        assert row["peer"] == "base" and set(row["us"]) == {"base", "lora", "lora_decode_k=64+split_k=64", "base+lora"}
        assert row["max_rel_err"] < 1e-4  # float32 on a CPU


def test_attention_small_over_an_fp8_cache(tmp_path) -> None:
    """--kv-cache-dtype fp8: the backends time over an e4m3 cache, whose KV bytes (the decode floor) halve."""
    assert main(["attention", "--small", "--backends", "torch", "--parts", "decode", "--kv-cache-dtype", "fp8",
                 "--out", str(tmp_path / "a.json")]) == 0
    result = _result(tmp_path / "a.json", "attention")
    assert result["args"]["kv_cache_dtype"] == "fp8"
    row = result["rows"][0]
    kv_bytes = 2 * row["case"]["batch"] * row["case"]["ctx"] * 2 * 64 * 1  # 2 kv heads of 64, one byte each
    assert row["gbs"]["torch"] == round(kv_bytes / row["us"]["torch"] / 1e3)


def test_int8_small_on_a_cpu(tmp_path) -> None:
    pytest.importorskip("pagoda_quant_fp8")
    if torch.cuda.is_available():
        pytest.skip("the CPU smoke case")
    assert main(["int8", "--small", "--out", str(tmp_path / "i.json")]) == 0
    rows = _result(tmp_path / "i.json", "int8")["rows"]
    assert [r["case"]["m"] for r in rows] == [1, 17, 64]
    assert all(r["peer"] == "bf16" and {"int8_int_mm", "int8_linear", "quant"} <= set(r["us"]) for r in rows)


def test_gemm_small_on_a_cpu(tmp_path, capsys) -> None:
    """The GEMM paths' smoke run: each row's floor is the weight bytes at the copy rate or the FLOPs at the matmul
    rate, whichever is longer, and the layer summary sums the rows of its M."""
    if torch.cuda.is_available():
        pytest.skip("the CPU smoke case")
    assert main(["gemm"]) == 2
    assert "error: gemm: needs a CUDA GPU (or --small" in capsys.readouterr().err
    assert main(["gemm", "--small", "--out", str(tmp_path / "g.json")]) == 0
    result = _result(tmp_path / "g.json", "gemm")
    env, rows = result["env"], result["rows"]
    assert [(r["case"]["layer"], r["case"]["m"]) for r in rows] == [("o", 1), ("o", 16), ("gate_up", 1), ("gate_up", 16)]
    for row in rows:
        m, n, k = (row["case"][key] for key in "mnk")
        floor = max(4 * n * k / (env["copy_gbs"] * 1e3), 2 * m * n * k / (env["matmul_tflops"] * 1e6))
        assert row["peer"] == "default" and row["floor_us"] == pytest.approx(floor, rel=1e-3)  # env keeps the rates to 4 digits
    for line in result["summary"]:
        same_m = [r for r in rows if r["case"]["m"] == line["m"]]
        assert line["us"]["default"] == pytest.approx(sum(r["us"]["default"] for r in same_m), rel=1e-3)
