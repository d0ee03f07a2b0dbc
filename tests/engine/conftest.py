"""Fixtures for engine-level tests: tiny random HF models built once per session."""

from __future__ import annotations

import pytest

from tiny_models import CONFIGS, make_tiny_model


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """family -> (folder, HF model) for each family, built once per session."""
    out = {}
    for family in CONFIGS:
        path = tmp_path_factory.mktemp(f"tiny-{family}")
        out[family] = (str(path), make_tiny_model(path, family))
    return out


