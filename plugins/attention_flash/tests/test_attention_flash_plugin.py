"""pagoda-attention-flash: the installed plugin loads through entry-point discovery and registers 'flash'."""

from __future__ import annotations

from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_flash() -> None:
    info = load_installed_plugin("pagoda-attention-flash", "attention-flash")
    assert info.module == "pagoda_attention_flash.plugin"
    assert info.registers == {"attention": ["flash"]}
