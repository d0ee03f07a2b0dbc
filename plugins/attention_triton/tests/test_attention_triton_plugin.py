"""pagoda-attention-triton: the plugin module imports, and a fresh PluginManager lists the installed plugin."""

from __future__ import annotations

import importlib
import importlib.metadata as md

import pytest

from pagoda.plugins.manager import PluginManager

DISTRIBUTION = "pagoda-attention-triton"
ENTRY_POINT = "attention-triton"
MODULE = "pagoda_attention_triton.plugin"


def test_installed_plugin_is_listed() -> None:
    try:
        version = md.version(DISTRIBUTION)
    except md.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed: pip install ./plugins/attention_triton")
    module = importlib.import_module(MODULE)
    assert "registers nothing yet" in module.__doc__
    info = PluginManager(allow=[ENTRY_POINT], block="").plugins[ENTRY_POINT]
    assert info.status == "loaded", info.errors
    assert (info.distribution, info.version, info.module) == (DISTRIBUTION, version, MODULE)
    assert version == "0.1.0"
    assert info.registers == {}  # nothing yet: no hook pretends to register 'triton'
