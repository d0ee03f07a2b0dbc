"""DeepSeek-V2/V3 through the engine (CPU, torch backend): greedy tokens and logprobs equal HF transformers'
through a small KV cache that forces preemptions and prompts that share a cached prefix; the KV cache holds
one latent row per token per layer; two pipeline stages equal one. (Tensor parallelism:
tests/engine/test_tensor_parallel.py.)"""

from __future__ import annotations

import pytest
import torch

from pagoda import LLM, SamplingParams
from pagoda.errors import IncompatibleChoiceError
from test_pipeline_parallel import run as run_stages
from test_tensor_parallel import shared_prefix_prompts
from tiny_models import hf_greedy

FAMILIES = ["deepseek_v2", "deepseek_v3"]
LATENT = 32 + 16  # kv_lora_rank + qk_rope_head_dim of both tiny configs
LAYERS, BLOCK = 3, 8
KV_BLOCKS = 14  # 112 tokens: fewer than the prompts need together, so the scheduler preempts


def engine(path: str, **kwargs) -> LLM:
    memory = KV_BLOCKS * BLOCK * LAYERS * LATENT * 4  # float32
    return LLM(model=path, dtype="float32", block_size=BLOCK, max_num_batched_tokens=40, max_num_seqs=6,
               kv_cache_memory=memory, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_equals_hf_with_prefix_caching_and_preemption(tiny_models, family):
    path, hf_model = tiny_models[family]
    prompts = shared_prefix_prompts()[:6]
    llm = engine(path)
    outputs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, logprobs=0), use_tqdm=False)
    stats = llm.engine.core.snapshot_stats()
    assert stats.num_preemptions > 0, "the small KV cache should force preemptions"
    assert stats.prefix_cache_hit_rate > 0, "the shared prefix should hit the prefix cache"
    for prompt, out in zip(prompts, outputs):
        hf_tokens, hf_logits = hf_greedy(hf_model, prompt, 24)
        completion = out.outputs[0]
        assert completion.token_ids == hf_tokens
        theirs = torch.log_softmax(hf_logits.double(), dim=-1)[torch.arange(24), torch.tensor(hf_tokens)]
        ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(hf_tokens)], dtype=torch.float64)
        assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


@pytest.mark.parametrize("family", FAMILIES)
def test_the_kv_cache_holds_one_latent_row_per_token(tiny_models, family):
    llm = engine(tiny_models[family][0])
    runner = llm.engine.core.runner
    spec = runner.attention.spec
    assert spec.mla is not None and spec.mla.latent_size == LATENT and spec.num_kv_heads == 1
    per_token = sum(c[:1].numel() * c.element_size() for c in runner.kv_caches) // BLOCK  # one block of each layer
    assert per_token == LAYERS * LATENT * 4  # float32: 48 values a layer, not 2 x 4 heads x (k, v) dims
    assert llm.engine.core.kv_cache.num_blocks == KV_BLOCKS


def test_an_fp8_latent_cache_is_refused_naming_mla(tiny_models):
    with pytest.raises(IncompatibleChoiceError, match="multi-head latent attention"):
        LLM(model=tiny_models["deepseek_v2"][0], dtype="float32", kv_cache_memory=1 << 20, kv_cache_dtype="fp8")


def test_two_pipeline_stages_equal_one(tiny_models):
    """Stage 0 holds the dense layer, stage 1 the two MoE layers (and their latent caches)."""
    path = tiny_models["deepseek_v3"][0]
    prompts = shared_prefix_prompts()
    expected, _, _ = run_stages(path, prompts)
    got, stats, in_flight = run_stages(path, prompts, pipeline_parallel_size=2, pp_layer_partition=[1, 2])
    assert got == expected and stats.num_preemptions > 0 and in_flight == 2
