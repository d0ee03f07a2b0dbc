"""Greedy parity with HF transformers on the same weights (float32, CPU)."""

from __future__ import annotations

import pytest
import torch

from tiny_models import hf_greedy, random_prompts
from pagoda import LLM, SamplingParams


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gemma3", "phi3",
                                    "deepseek_v2", "deepseek_v3"])
def test_greedy_tokens_and_logprobs_match_hf(tiny_models, family):
    path, hf_model = tiny_models[family]
    prompts = random_prompts(9, range(3, 41), seed=7)
    max_tokens = [32 + i for i in range(len(prompts))]
    params = [SamplingParams(temperature=0, max_tokens=m, logprobs=0) for m in max_tokens]
    # a small token budget forces chunked prefills mixed with decodes; block size 8 crosses blocks often
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_batched_tokens=48)
    outputs = llm.generate(prompts, params, use_tqdm=False)
    for prompt, m, out in zip(prompts, max_tokens, outputs):
        completion = out.outputs[0]
        hf_tokens, hf_logits = hf_greedy(hf_model, prompt, m)
        assert completion.token_ids == hf_tokens
        assert completion.finish_reason == "length"
        hf_logprobs = torch.log_softmax(hf_logits.double(), dim=-1)
        ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(hf_tokens)], dtype=torch.float64)
        theirs = hf_logprobs[torch.arange(len(hf_tokens)), torch.tensor(hf_tokens)]
        assert torch.allclose(ours, theirs, atol=1e-4), (ours - theirs).abs().max()


def test_prompt_logprobs_match_hf(tiny_models):
    path, hf_model = tiny_models["qwen2"]
    prompt = random_prompts(1, range(30, 31), seed=8)[0]
    llm = LLM(model=path, dtype="float32", block_size=8, max_num_batched_tokens=12)  # prompt spans 3 chunks
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=2), use_tqdm=False)[0]
    with torch.no_grad():
        expected = torch.log_softmax(hf_model(torch.tensor([prompt])).logits[0].double(), dim=-1)
    assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
    for pos in range(1, len(prompt)):
        entry = out.prompt_logprobs[pos]
        assert abs(entry[prompt[pos]].logprob - expected[pos - 1, prompt[pos]].item()) < 1e-4
        top = expected[pos - 1].topk(2)
        ranked = {tid: lp for tid, lp in entry.items() if lp.rank is not None}
        assert sorted(ranked, key=lambda t: ranked[t].rank) == top.indices.tolist()
