"""pagoda-attention-flash: the plugin loads through entry-point discovery and registers nothing yet."""

from __future__ import annotations

import importlib

from pagoda.testing import load_installed_plugin


def test_installed_plugin_is_listed() -> None:
    info = load_installed_plugin("pagoda-attention-flash", "attention-flash")
    assert info.module == "pagoda_attention_flash.plugin"
    assert "registers nothing yet" in importlib.import_module(info.module).__doc__
    assert info.registers == {}  # no hook pretends to register what a later issue brings
