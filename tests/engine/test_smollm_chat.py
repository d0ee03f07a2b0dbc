"""The embedded SmolLM2-135M-Instruct: Pagoda's greedy chat equals HF transformers' on the same GGUF."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import smollm  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402

QUESTIONS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "How many legs does a spider have?",
    "Explain in one sentence what a CPU does.",
]
MAX_TOKENS = 40


@pytest.fixture(scope="module")
def pagoda_llm():
    return LLM(dtype="float32")


def test_greedy_chat_matches_hf(pagoda_llm):
    hf_model, tokenizer = smollm.hf_model_and_tokenizer()
    conversations = [[{"role": "user", "content": q}] for q in QUESTIONS]
    outputs = pagoda_llm.chat(conversations, SamplingParams(temperature=0, max_tokens=MAX_TOKENS), use_tqdm=False)
    assert pagoda_llm.get_tokenizer().eos_token_id == hf_model.generation_config.eos_token_id or \
        pagoda_llm.get_tokenizer().eos_token_id in hf_model.generation_config.eos_token_id
    for conversation, out in zip(conversations, outputs):
        ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
        assert out.prompt_token_ids == list(ids)
        with torch.inference_mode():
            hf = hf_model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS, do_sample=False)
        hf_tokens = hf[0, len(ids):].tolist()
        assert out.outputs[0].token_ids == hf_tokens, (out.outputs[0].text, tokenizer.decode(hf_tokens))
        assert out.outputs[0].text == tokenizer.decode(hf_tokens, skip_special_tokens=True)
        assert len(out.outputs[0].text) > 0
