"""Choosing the quantization method: the flag, else config.json's quant_method, checked for agreement."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pagoda.errors import IncompatibleChoiceError
from pagoda.quantization.select import checkpoint_quant_method, resolve_quantization

AWQ = SimpleNamespace(quantization_config={"quant_method": "AWQ", "bits": 4})
DENSE = SimpleNamespace()


def test_checkpoint_method_is_read_from_the_config() -> None:
    assert checkpoint_quant_method(AWQ) == "awq"
    assert checkpoint_quant_method(DENSE) is None
    assert checkpoint_quant_method(SimpleNamespace(quantization_config=SimpleNamespace(quant_method="fp8"))) == "fp8"


def test_without_the_flag_the_checkpoint_decides() -> None:
    assert resolve_quantization(None, AWQ) == "awq"
    assert resolve_quantization(None, DENSE) == "none"
    assert resolve_quantization("awq", AWQ) == "awq"
    assert resolve_quantization("none", DENSE) == "none"


def test_flag_and_checkpoint_must_agree() -> None:
    with pytest.raises(IncompatibleChoiceError, match="--quantization fp8 does not match .* quantized with 'awq'"):
        resolve_quantization("fp8", AWQ)
    with pytest.raises(IncompatibleChoiceError, match="--quantization awq needs a checkpoint quantized with 'awq'"):
        resolve_quantization("awq", DENSE)
    assert resolve_quantization("awq", DENSE, load_format="dummy") == "awq"  # random weights in any layout
