"""``attention_backend="cpu"``: greedy tokens and logprobs equal HF transformers' on the same weights, with
decodes batched beside chunked prefills; ``auto`` chooses it on the CPU platform and ``check`` refuses others."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "engine"))
from tiny_models import assert_greedy_matches_hf, make_tiny_model, random_prompts  # noqa: E402

from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.interfaces.platform import Platform  # noqa: E402
from pagoda.platforms.cpu import CpuPlatform  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402
from pagoda_attention_cpu.backend import CpuAttentionBackend  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])  # GQA; q/k norms; interleaved sliding windows
def test_greedy_tokens_and_logprobs_match_hf(tmp_path: Path, family: str) -> None:
    hf_model = make_tiny_model(tmp_path, family)
    prompts = random_prompts(6, range(3, 60), seed=11)
    max_tokens = [24 + 3 * i for i in range(len(prompts))]
    llm = LLM(model=str(tmp_path), dtype="float32", attention_backend="cpu", block_size=8, max_num_batched_tokens=40)
    assert isinstance(llm.engine.core.runner.attention, CpuAttentionBackend)
    assert_greedy_matches_hf(llm, hf_model, prompts, max_tokens)


def test_auto_chooses_cpu_on_the_cpu_platform() -> None:
    assert PluginManager().registry("attention").select("auto", platform=CpuPlatform())[0] == "cpu"


def test_check_names_the_platform_it_runs_on() -> None:
    class Elsewhere(Platform):
        name = "elsewhere"
        device_type = "meta"

    assert CpuAttentionBackend.check(Elsewhere) == "the cpu backend runs on the cpu platform only"
    assert CpuAttentionBackend.check(CpuPlatform()) is None


def test_fp8_cache_takes_the_reference_path(tmp_path: Path) -> None:
    """An FP8 KV cache (stored scaled) is attended by the torch reference's path: the same tokens as `torch`."""
    make_tiny_model(tmp_path, "llama")
    prompts = random_prompts(4, range(5, 40), seed=12)
    params = SamplingParams(temperature=0, max_tokens=12)

    def tokens(backend: str) -> list[list[int]]:
        llm = LLM(model=str(tmp_path), dtype="float32", attention_backend=backend, kv_cache_dtype="fp8", block_size=8,
                  kv_cache_memory=16 << 20)
        return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]

    assert tokens("cpu") == tokens("torch")
