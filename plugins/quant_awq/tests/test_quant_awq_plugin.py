"""pagoda-quant-awq: the installed plugin loads through entry-point discovery and registers 'awq'."""

from __future__ import annotations

from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_awq() -> None:
    info = load_installed_plugin("pagoda-quant-awq", "quant-awq")
    assert info.module == "pagoda_quant_awq.plugin"
    assert info.registers == {"quantization": ["awq"]}
