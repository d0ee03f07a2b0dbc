"""The plugin template (`pagoda plugins new`) in-process: a template for every kind, class names that do
not repeat the kind, priorities below the built-ins', and READMEs that say what `auto` means.
tests/test_outsider_plugins.py installs every kind into a venv and runs it end to end."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

from pagoda.cli.scaffold import TEMPLATE_KINDS, placeholders, render, write_package
from pagoda.plugins.catalog import KINDS
from pagoda.plugins.manager import PluginManager


def test_every_kind_has_a_template() -> None:
    assert set(TEMPLATE_KINDS) == set(KINDS) | {"command", "multimodal_model"}
    assert TEMPLATE_KINDS["multimodal_model"].registry == "model"  # a second template of the model kind
    for kind in TEMPLATE_KINDS:
        files = render(placeholders(f"my-{kind.replace('_', '-')}", kind))
        # every placeholder filled (Jinja's "{{ expr }}" in a chat template is not one)
        assert not [rel for rel, text in files.items() if re.search(r"\{\{\w+\}\}", rel + text)], kind
        assert {"README.md", "pyproject.toml"} <= set(files) and any(rel.startswith("tests/") for rel in files)


@pytest.mark.parametrize("name, kind, cls", [
    ("my-platform", "platform", "MyPlatform"),
    ("my-attn", "attention", "MyAttnBackend"),
    ("paged-backend", "attention", "PagedBackend"),
    ("int8-method", "quantization", "Int8Method"),
    ("my-scheduler", "scheduler", "MyScheduler"),
    ("my-prop", "proposer", "MyPropProposer"),
    ("my-tool-parser", "tool_parser", "MyToolParser"),
    ("fast-parser", "tool_parser", "FastToolParser"),
    ("my-reasoning-parser", "reasoning_parser", "MyReasoningParser"),
    ("my-model", "model", "MyModelForCausalLM"),
    ("my-vlm", "multimodal_model", "MyVlmForConditionalGeneration"),
    ("my-command", "command", "MyCommand"),
    ("my-kv-connector", "kv_connector", "MyKvConnector"),
])
def test_class_names_do_not_repeat_the_kind(name: str, kind: str, cls: str) -> None:
    values = placeholders(name, kind)
    assert values["class"] == cls
    assert values["registered"] == (cls if "model" in kind else name)  # a model registers its architecture


@pytest.fixture
def generated(tmp_path, monkeypatch: pytest.MonkeyPatch):
    """``generated(kind)``: the class of a freshly rendered plugin of ``kind``, imported in-process."""
    def load(kind: str) -> type:
        values = placeholders(f"tmpl-{kind.replace('_', '-')}", kind)
        write_package(tmp_path / values["distribution"], values)
        monkeypatch.syspath_prepend(str(tmp_path / values["distribution"]))
        return getattr(importlib.import_module(f"{values['package']}.{values['module']}"), values["class"])

    yield load
    for name in [n for n in sys.modules if n.startswith("pagoda_tmpl_")]:
        del sys.modules[name]


@pytest.mark.parametrize("kind", [k for k in KINDS if KINDS[k].auto and k not in ("model", "proposer", "quantization")])
def test_a_template_never_wins_auto_by_being_installed(kind: str, generated) -> None:
    builtins = PluginManager(entry_points=False).registry(kind).entries()
    assert builtins, kind
    assert generated(kind).priority < min(getattr(e.obj, "priority", 0) for e in builtins)


@pytest.mark.parametrize("kind, sentence", [
    ("quantization", "`auto` (the default) means what the checkpoint declares, else `none`"),
    ("attention", "`auto` picks the highest-priority usable attention backend; this one declares `priority = -1`"),
    ("scheduler", "`auto` picks the highest-priority usable scheduler"),
    ("guided_decoding", "`auto` picks the highest-priority usable guided decoding backend"),
    ("proposer", "`auto` never turns speculation on"),
    ("model", "lists `\"TmplModelForCausalLM\"` in `architectures`"),
    ("multimodal_model", "lists `\"TmplMultimodalModelForConditionalGeneration\"` in `architectures`"),
    ("command", "Run it: `pagoda tmpl-command --help`"),
    ("kv_connector", "`--kv-transfer-config '{\"kv_connector\": \"tmpl-kv-connector\", \"kv_role\": \"kv_both\"}'`"),
])
def test_readmes_say_how_the_capability_is_chosen(kind: str, sentence: str) -> None:
    readme = render(placeholders(f"tmpl-{kind.replace('_', '-')}", kind))["README.md"]
    assert sentence in re.sub(r"\s+", " ", readme)
