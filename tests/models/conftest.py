"""Fixtures for model tests: the shared helpers live in tests/ (hf_tiny.py, smollm.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import smollm  # noqa: E402


@pytest.fixture(scope="session")
def smollm_hf():
    """(HF model, tokenizer) of the embedded SmolLM2 GGUF, converted by transformers itself."""
    return smollm.hf_model_and_tokenizer()
