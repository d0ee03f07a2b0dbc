"""CUDA graphs for decode and overlapped steps: bf16 greedy tokens equal with each on and off (Triton attention)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytest.importorskip("pagoda_attention_triton", reason="graphs need a graph-safe backend: pagoda-attention-triton")
pytestmark = pytest.mark.gpu

ENGINE_TESTS = Path(__file__).resolve().parents[3] / "tests" / "engine"


def _tiny_models():
    if not (ENGINE_TESTS / "tiny_models.py").is_file():
        pytest.skip("needs the repository's tests/engine/tiny_models.py")
    sys.path.insert(0, str(ENGINE_TESTS))
    import tiny_models

    return tiny_models


def test_bf16_greedy_equal_with_and_without_graphs(tmp_path):
    tiny_models = _tiny_models()
    from pagoda import LLM, SamplingParams

    tiny_models.make_tiny_model(tmp_path, "qwen3")
    prompts = tiny_models.random_prompts(37, range(3, 60), seed=5)  # 37 sequences: padded to 48
    params = [SamplingParams(temperature=0, max_tokens=20 + i % 7) for i in range(len(prompts))]
    common = dict(model=str(tmp_path), platform="cuda", attention_backend="triton", dtype="bfloat16",
                  max_num_seqs=64, gpu_memory_utilization=0.3)
    eager = LLM(**common, enforce_eager=True).generate(prompts, params, use_tqdm=False)
    graphed_llm = LLM(**common)
    assert graphed_llm.engine.core.runner.graphs is not None and 48 in graphed_llm.engine.core.runner.graphs.graphs
    graphed = graphed_llm.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in graphed] == [o.outputs[0].token_ids for o in eager]


def test_bf16_greedy_equal_with_and_without_overlap(tmp_path):
    tiny_models = _tiny_models()
    from pagoda import LLM, SamplingParams

    tiny_models.make_tiny_model(tmp_path, "llama")
    prompts = tiny_models.random_prompts(53, range(3, 60), seed=9)
    # ignore_eos: every sequence ends by length, so both schedules batch the same rows each step
    params = [SamplingParams(temperature=0, max_tokens=10 + i % 23, ignore_eos=True) for i in range(len(prompts))]
    common = dict(model=str(tmp_path), platform="cuda", attention_backend="triton", dtype="bfloat16",
                  max_num_seqs=32, max_num_batched_tokens=256, gpu_memory_utilization=0.3)
    serial = LLM(**common, overlap_steps=False).generate(prompts, params, use_tqdm=False)
    overlapped_llm = LLM(**common, overlap_steps=True)
    assert overlapped_llm.engine.core.runner.graphs is not None
    overlapped = overlapped_llm.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in overlapped] == [o.outputs[0].token_ids for o in serial]
    assert all(len(o.outputs[0].token_ids) == p.max_tokens for o, p in zip(overlapped, params))


def test_bf16_greedy_equal_with_either_dependent_launch_order(tmp_path):
    """The Triton attention kernels and the flash reduction let the next kernel start before they wait,
    and the GEMV requests two blocks before its wait, four blocks an SM at one row a warp;
    PAGODA_PDL_EARLY=0 PAGODA_GEMV_PRELOAD=1 PAGODA_GEMV_OCCUPANCY=0 is the old order. The csrc kernels read
    those once a process, so each order runs in a child: same tokens."""
    import json
    import os
    import subprocess

    _tiny_models().make_tiny_model(tmp_path, "llama")
    code = (f"import json, sys; sys.path.insert(0, {str(ENGINE_TESTS)!r}); import tiny_models\n"
            "from pagoda import LLM, SamplingParams\n"
            "prompts = tiny_models.random_prompts(9, range(3, 60), seed=3)\n"
            "params = [SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)] * len(prompts)\n"
            f"llm = LLM(model={str(tmp_path)!r}, platform='cuda', attention_backend='triton', dtype='bfloat16',"
            " max_num_seqs=16, gpu_memory_utilization=0.2)\n"
            "outs = llm.generate(prompts, params, use_tqdm=False) + llm.generate(prompts[:1], params[:1], use_tqdm=False)\n"
            "print(json.dumps([o.outputs[0].token_ids for o in outs]))\n")
    tokens = []
    for early, preload, occupancy in (("0", "1", "0"), ("1", "2", "1")):
        env = {**os.environ, "PAGODA_PDL_EARLY": early, "PAGODA_GEMV_PRELOAD": preload,
               "PAGODA_GEMV_OCCUPANCY": occupancy}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        tokens.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert tokens[0] == tokens[1] and all(len(t) == 24 for t in tokens[0])
