"""Choosing the quantization method: the flag, else config.json's quant_method; none never loads quantized tensors."""

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


@pytest.mark.parametrize("requested", [None, "auto"])
def test_without_the_flag_or_with_auto_the_checkpoint_decides(requested) -> None:
    assert resolve_quantization(requested, AWQ) == "awq"
    assert resolve_quantization(requested, DENSE) == "none"


def test_an_explicit_method_is_kept() -> None:
    assert resolve_quantization("awq", AWQ) == "awq"
    assert resolve_quantization("none", DENSE) == "none"
    assert resolve_quantization("awq", DENSE) == "awq"  # dummy weights, or online quantization by the method
    assert resolve_quantization("fp8", AWQ) == "fp8"  # the method itself rejects a config it cannot read


def test_none_refuses_a_quantized_checkpoint() -> None:
    with pytest.raises(IncompatibleChoiceError, match="--quantization none cannot load this checkpoint: it is quantized with 'awq'"):
        resolve_quantization("none", AWQ)
