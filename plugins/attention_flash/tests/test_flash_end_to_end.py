"""End to end on a GPU: greedy generation with ``flash`` equals ``triton`` on tiny random models
(head sizes 64 and 128, MQA/GQA, a sliding window) in float16 and bfloat16, with chunked
prefills, prefix-cache hits and CUDA-graph decodes; and with n-gram speculation, whose verify steps
run on the decode kernel, equal to flash without it.

The kernels differ in summation order, so a greedy choice may flip where the two best tokens are
within rounding of each other: each sequence must be equal up to its first difference, and there
the reference run (triton) must show a near tie (top-2 logprob gap below the dtype's bound).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("pagoda_platform_cuda", reason="pagoda-platform-cuda is not installed")
pytest.importorskip("pagoda_attention_triton", reason="the reference backend: pagoda-attention-triton")
pytestmark = pytest.mark.gpu

ENGINE_TESTS = Path(__file__).resolve().parents[3] / "tests" / "engine"
NEAR_TIE = {"float16": 0.05, "bfloat16": 0.3}  # top-2 logprob gap that rounding may flip


def _tiny_models():
    if not (ENGINE_TESTS / "tiny_models.py").is_file():
        pytest.skip("needs the repository's tests/engine/tiny_models.py")
    sys.path.insert(0, str(ENGINE_TESTS))
    import tiny_models

    return tiny_models


def _config(name: str):
    import transformers

    common = dict(vocab_size=384, intermediate_size=256, num_hidden_layers=2, max_position_embeddings=1024,
                  eos_token_id=None, bos_token_id=None, pad_token_id=None)
    if name == "llama-mqa-d64":
        return transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=1, head_dim=64, **common)
    if name == "qwen3-gqa-d128":
        return transformers.Qwen3Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=128, **common)
    return transformers.MistralConfig(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64,
                                      sliding_window=48, **common)


def _make_model(path: Path, name: str) -> str:
    import transformers

    tiny_models = _tiny_models()
    torch.manual_seed(4321)
    model = transformers.AutoModelForCausalLM.from_config(_config(name), dtype=torch.float32).eval()
    with torch.no_grad():  # larger weights than the default init: less flat greedy choices
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.08)
    model.save_pretrained(path)
    tiny_models.save_word_tokenizer(path)
    return str(path)


def _prompts() -> list[list[int]]:
    tiny_models = _tiny_models()
    prompts = tiny_models.random_prompts(12, range(5, 300), seed=7)
    shared = prompts[0][:80] if len(prompts[0]) >= 80 else prompts[0]
    return prompts + [shared + p[:20] for p in prompts[1:5]]  # prefix-cache hits on the shared blocks


def _generate(path: str, backend: str, dtype: str, prompts: list[list[int]], **extra):
    """Greedy outputs (24 tokens, top-2 logprobs) and the LLM."""
    from pagoda import LLM, SamplingParams

    llm = LLM(model=path, platform="cuda", attention_backend=backend, dtype=dtype, block_size=16,
              max_num_batched_tokens=128, max_num_seqs=16, max_model_len=1024, gpu_memory_utilization=0.3, **extra)
    expected = {"flash": "FlashAttentionBackend", "triton": "TritonAttentionBackend"}[backend]
    assert type(llm.engine.core.runner.attention).__name__ == expected
    params = SamplingParams(temperature=0, max_tokens=24, logprobs=2, ignore_eos=True)
    return [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)], llm


def _assert_equal_up_to_near_ties(outputs, reference, dtype: str) -> None:
    """Each sequence equal to the reference's up to its first difference, a near tie of the reference
    there; at least half equal whole."""
    equal = 0
    for i, (f, t) in enumerate(zip(outputs, reference)):
        if f.token_ids == t.token_ids:
            equal += 1
            continue
        step = next(j for j, (a, b) in enumerate(zip(f.token_ids, t.token_ids)) if a != b)
        top = sorted((lp.logprob for lp in t.logprobs[step].values()), reverse=True)
        gap = top[0] - top[1] if len(top) > 1 else float("inf")
        assert gap < NEAR_TIE[dtype], (f"prompt {i}: outputs differ at step {step} where the reference's top-2 "
                                       f"gap is {gap:.3f} (not a near tie)")
    assert equal >= len(reference) // 2, f"only {equal} of {len(reference)} sequences are equal"


@pytest.mark.parametrize(
    "model,dtype",
    [("llama-mqa-d64", "float16"), ("qwen3-gqa-d128", "float16"), ("mistral-window-d64", "float16"),
     ("qwen3-gqa-d128", "bfloat16")],
)
def test_flash_greedy_equals_triton(tmp_path: Path, model: str, dtype: str) -> None:
    path = _make_model(tmp_path / model, model)
    prompts = _prompts()
    flash, _ = _generate(path, "flash", dtype, prompts)
    triton, _ = _generate(path, "triton", dtype, prompts)
    _assert_equal_up_to_near_ties(flash, triton, dtype)


@pytest.mark.parametrize("model", ["qwen3-gqa-d128", "mistral-window-d64"])
def test_flash_speculative_verify_on_the_decode_kernel(tmp_path: Path, model: str) -> None:
    """n-gram speculation (3 drafts): the verify steps' 4-token queries go to the decode kernel
    (short_query_len 4 seen); greedy tokens equal flash without speculation up to near ties."""
    from pagoda_attention_flash.backend import FlashAttentionBackend

    path = _make_model(tmp_path / model, model)
    prompts = [p * 3 for p in _tiny_models().random_prompts(8, range(6, 20), seed=3)]  # repeats: drafts accepted
    plain, _ = _generate(path, "flash", "float16", prompts)
    seen: list[int] = []
    prepare = FlashAttentionBackend.prepare

    def recording(self, metadata):
        out = prepare(self, metadata)
        seen.append(out.extra.short_query_len)
        return out

    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False}
    FlashAttentionBackend.prepare = recording
    try:
        drafted, llm = _generate(path, "flash", "float16", prompts, speculative_config=spec)
    finally:
        FlashAttentionBackend.prepare = prepare
    assert llm.engine.stats.spec_num_accepted_tokens > 0 and 4 in seen
    _assert_equal_up_to_near_ties(drafted, plain, "float16")
