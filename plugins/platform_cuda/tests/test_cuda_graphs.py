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
