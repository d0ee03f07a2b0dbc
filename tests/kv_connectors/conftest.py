"""Fixtures of the KV connector tests: a tiny random Llama (tests/engine/tiny_models.py), and a recorder of the
tokens each step schedules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))

from tiny_models import make_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("kv-llama")
    make_tiny_model(path, "llama")
    return str(path)
