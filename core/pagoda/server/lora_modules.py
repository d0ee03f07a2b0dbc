"""``pagoda serve --lora-modules``: the adapters an engine core loads before it serves (docs/lora.md)."""

from __future__ import annotations

import json

from pagoda.config import EngineConfig
from pagoda.engine_core.core import EngineCore


def parse_lora_modules(values: list[str] | None, base_names: list[str]) -> list[tuple[str, str]]:
    """``name=path`` (or vLLM's JSON ``{"name": ..., "path": ...}``) per adapter -> ``[(name, path)]``;
    ValueError naming a malformed entry, a repeated name or a base model's name."""
    modules: list[tuple[str, str]] = []
    for value in values or []:
        name, path = _parse_one(value)
        if name in base_names:
            raise ValueError(f"--lora-modules: '{name}' is the base model's served name; give the adapter another")
        if any(name == seen for seen, _ in modules):
            raise ValueError(f"--lora-modules names '{name}' twice; give each adapter its own name")
        modules.append((name, path))
    return modules


def _parse_one(value: str) -> tuple[str, str]:
    if value.lstrip().startswith("{"):
        try:
            entry = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--lora-modules: {value!r} is not valid JSON ({exc})") from None
        name, path = (entry.get("name"), entry.get("path")) if isinstance(entry, dict) else (None, None)
    else:
        name, _, path = value.partition("=")
    if not isinstance(name, str) or not isinstance(path, str) or not name.strip() or not path.strip():
        raise ValueError(f"--lora-modules: {value!r} is not NAME=PATH (or {{\"name\": ..., \"path\": ...}})")
    return name.strip(), path.strip()


def core_with_lora_modules(modules: list[tuple[str, str]], config: EngineConfig) -> EngineCore:
    """An engine core that loaded ``modules`` (ids 1, 2, ... in order); its start fails on a bad adapter."""
    core = EngineCore.from_config(config)
    try:
        for lora_id, (name, path) in enumerate(modules, start=1):
            core.add_lora(name, path, lora_id)
    except BaseException:
        core.shutdown()
        raise
    return core
