"""Tiny base models with three peft adapters each, built once per session."""

from __future__ import annotations

import pytest

from lora_models import ADAPTERS, make_adapter, make_base


@pytest.fixture(scope="session")
def lora_models(tmp_path_factory):
    """family -> (base folder, {adapter name: adapter folder})."""
    out = {}
    for family in ("llama", "qwen3"):
        root = tmp_path_factory.mktemp(f"lora-{family}")
        base = make_base(root / "base", family)
        out[family] = (base, {name: make_adapter(base, root / name, **kw) for name, kw in ADAPTERS.items()})
    return out
