"""The quantization method follows config.json's quantization_config; --kv-cache-dtype takes the FP8 names only
(a backend that stores none of them is refused: tests/attention/test_kv_cache_fp8.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pagoda.quantization.select import resolve_quantization


@pytest.mark.parametrize("quant_config,expected", [
    (None, "none"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized"}, "fp8"),  # renamed by the table
    ({"quant_method": "gptq", "bits": 4}, "gptq"),  # unknown here: the registry names what exists
])
def test_checkpoint_formats_select_their_method(quant_config, expected) -> None:
    assert resolve_quantization(None, SimpleNamespace(quantization_config=quant_config)) == expected
    assert resolve_quantization("fp8", SimpleNamespace(quantization_config=quant_config)) == "fp8"


def test_kv_cache_dtype_takes_the_fp8_names_only() -> None:
    from pagoda import LLM

    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8"):
        LLM(kv_cache_dtype="int8")
