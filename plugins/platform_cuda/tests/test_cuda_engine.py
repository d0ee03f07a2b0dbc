"""End to end on a GPU: HF parity in float32 on platform cuda, and a bf16 dummy-weight run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytestmark = pytest.mark.gpu

ENGINE_TESTS = Path(__file__).resolve().parents[3] / "tests" / "engine"


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    if not (ENGINE_TESTS / "tiny_models.py").is_file():
        pytest.skip("needs the repository's tests/engine/tiny_models.py")
    sys.path.insert(0, str(ENGINE_TESTS))
    import tiny_models

    path = tmp_path_factory.mktemp("tiny-llama-cuda")
    return str(path), tiny_models.make_tiny_model(path, "llama"), tiny_models


def test_float32_greedy_tokens_match_hf_on_cuda(tiny_llama):
    from pagoda import LLM, SamplingParams

    path, hf_model, tiny_models = tiny_llama
    prompts = tiny_models.random_prompts(6, range(3, 41), seed=11)
    llm = LLM(model=path, platform="cuda", dtype="float32", block_size=16, max_num_batched_tokens=64,
              gpu_memory_utilization=0.3)
    assert llm.engine.core.parts.platform.custom_ops().name == "cuda", "the CUDA kernels did not load"
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24), use_tqdm=False)
    for prompt, out in zip(prompts, outputs):
        hf_tokens, _ = tiny_models.hf_greedy(hf_model, prompt, 24)
        assert out.outputs[0].token_ids == hf_tokens


def test_bf16_dummy_weights_run(tiny_llama):
    from pagoda import LLM, SamplingParams

    path, _, _ = tiny_llama
    llm = LLM(model=path, platform="cuda", load_format="dummy", gpu_memory_utilization=0.3)  # auto dtype: bf16
    assert llm.engine.core.parts.dtype == torch.bfloat16
    outputs = llm.generate([[1, 2, 3, 4]] * 5, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True),
                           use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outputs] == [16] * 5
