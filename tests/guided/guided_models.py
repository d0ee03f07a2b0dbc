"""A tiny random Llama that speaks SmolLM2's tokenizer (a real BPE vocabulary: grammars need one)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from smollm import hf_tokenizer  # noqa: E402


def make_tiny_smollm_vocab_model(path: Path) -> str:
    """Random weights (2 layers, hidden 64) over SmolLM2's 49,152-token vocabulary, with its tokenizer."""
    tokenizer = hf_tokenizer()
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=None, pad_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(7)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)
