"""pagoda-attention-triton: the installed plugin loads through entry-point discovery and registers 'triton'."""

from __future__ import annotations

from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_triton() -> None:
    info = load_installed_plugin("pagoda-attention-triton", "attention-triton")
    assert info.module == "pagoda_attention_triton.plugin"
    assert info.registers == {"attention": ["triton"]}
