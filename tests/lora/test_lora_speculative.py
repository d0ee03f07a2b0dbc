"""LoRA adapters with speculative decoding: the target verifies with each request's adapter, so greedy tokens
and logprobs equal HF transformers + peft, with n-gram drafts and with a draft model (which runs without
adapters), three adapters and the base model mixed in one batch; drafts are proposed and accepted."""

from __future__ import annotations

import json

import pytest
import torch

from lora_models import hf_greedy, hf_reference, random_prompts
from pagoda import LLM, LoRARequest, SamplingParams

MAX_TOKENS = 16


def _prompts() -> list[list[int]]:
    return [p * 3 for p in random_prompts(8, range(4, 9), seed=11)]  # repeated text: n-gram lookups find drafts


@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_adapters_under_speculation_match_hf_peft(lora_models, method):
    base, adapters = lora_models["llama"]
    loras = [LoRARequest(name, i + 1, str(path)) for i, (name, path) in enumerate(adapters.items())]
    per_prompt = [*loras, None, *loras, None]
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "backoff": False}
    if method == "draft":
        spec = {"method": "draft", "model": str(base), "num_speculative_tokens": 3, "backoff": False}
    llm = LLM(str(base), dtype="float32", skip_tokenizer_init=True, enable_lora=True, max_loras=3, max_lora_rank=16,
              block_size=8, speculative_config=json.dumps(spec))
    try:
        outputs = llm.generate(_prompts(), SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0),
                               use_tqdm=False, lora_request=per_prompt)
        speculator = llm.engine.core.speculator
        assert speculator.num_drafts > 0 and speculator.num_accepted > 0, (speculator.num_drafts, speculator.num_accepted)
    finally:
        llm.shutdown()
    references = {}
    for prompt, lora, out in zip(_prompts(), per_prompt, outputs):
        key = None if lora is None else lora.lora_path
        references.setdefault(key, hf_reference(base, key))
        tokens, logprobs = hf_greedy(references[key], prompt, MAX_TOKENS)
        completion = out.outputs[0]
        assert completion.token_ids == tokens, (lora, completion.token_ids, tokens)
        ours = torch.tensor([completion.logprobs[i][t].logprob for i, t in enumerate(tokens)], dtype=torch.float64)
        assert torch.allclose(ours, logprobs, atol=1e-4), (ours - logprobs).abs().max()
