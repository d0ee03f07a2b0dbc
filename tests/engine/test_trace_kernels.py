"""pagoda.bench.trace_kernels: time by op name from a traced offline run, and a decode step's share of it as the
difference of two runs (what ``benchmarks/lora_throughput.py --profile-kernels`` records)."""

from __future__ import annotations

from collections import Counter

from tiny_models import random_prompts
from pagoda import LLM, SamplingParams
from pagoda.bench.trace_kernels import TRACE_GLOB, per_step, traced_times_us
from pagoda.envs import TORCH_PROFILER_DIR


def test_per_step_is_the_difference_over_the_steps():
    long_run = Counter({"gemm": 1000, "attend": 500, "prefill_only": 40, "sample": 90})
    short_run = Counter({"gemm": 200, "attend": 100, "prefill_only": 40, "sample": 10})
    got = per_step(long_run, short_run, 8, top=2)
    assert got == {"total_us": (800 + 400 + 0 + 80) / 8, "gemm": 100.0, "attend": 50.0}


def test_a_traced_run_names_its_ops_and_leaves_no_trace(tiny_models, tmp_path, monkeypatch):
    path, _ = tiny_models["llama"]
    monkeypatch.setenv(TORCH_PROFILER_DIR.name, str(tmp_path))
    llm = LLM(model=path, dtype="float32", block_size=8)
    prompts = random_prompts(2, range(5, 9), seed=3)
    try:
        def run(tokens: int) -> Counter:
            params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
            return traced_times_us(llm, lambda: llm.generate(prompts, params, use_tqdm=False), "cpu_op")

        short, long = run(1), run(9)
    finally:
        llm.shutdown()
    assert not list(tmp_path.glob(TRACE_GLOB))  # read, then removed
    linear_ops = {"aten::mm", "aten::addmm", "aten::linear", "mkldnn::_linear_pointwise"}
    assert linear_ops & set(short) and linear_ops & set(long)
    step = per_step(long, short, 8, top=50)
    assert step["total_us"] > 0 and linear_ops & set(step)  # 8 decode steps of products beyond the first token
