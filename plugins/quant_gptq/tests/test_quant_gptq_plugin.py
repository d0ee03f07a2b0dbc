"""pagoda-quant-gptq: the installed plugin loads through entry-point discovery and registers 'gptq' and 'wna16'."""

from __future__ import annotations

from pagoda.testing import load_installed_plugin


def test_installed_plugin_registers_its_methods() -> None:
    info = load_installed_plugin("pagoda-quant-gptq", "quant-gptq")
    assert info.module == "pagoda_quant_gptq.plugin"
    assert info.registers == {"quantization": ["gptq", "wna16"]}
