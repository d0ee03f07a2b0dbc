"""The quantization method follows config.json's quantization_config; --kv-cache-dtype needs a backend that stores it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pagoda.errors import IncompatibleChoiceError
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


def test_fp8_kv_cache_needs_a_backend_that_stores_it() -> None:
    from pagoda import LLM

    with pytest.raises(IncompatibleChoiceError, match="the attention backend torch does not support an fp8 KV cache"):
        LLM(kv_cache_dtype="fp8", attention_backend="torch", skip_tokenizer_init=True)
    with pytest.raises(ValueError, match="kv_cache_dtype must be one of auto, fp8"):
        LLM(kv_cache_dtype="int8")
