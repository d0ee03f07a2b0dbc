"""Choosing the quantization method: the flag, else config.json's quant_method; none never loads quantized tensors."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pagoda.errors import IncompatibleChoiceError, ModelLoadError
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


def _ct(weights: dict | None, acts: dict | None = None, fmt: str | None = "pack-quantized", **extra) -> SimpleNamespace:
    group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
    qc = {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, **extra}
    if fmt is not None:
        qc["format"] = fmt
    return SimpleNamespace(quantization_config=qc)


INT4_GROUP = {"type": "int", "num_bits": 4, "strategy": "group", "group_size": 128, "symmetric": True}
INT8_CHANNEL = {"type": "int", "num_bits": 8, "strategy": "channel", "symmetric": True}
INT8_TOKEN = {"type": "int", "num_bits": 8, "strategy": "token", "dynamic": True, "symmetric": True}
FP8_TENSOR = {"type": "float", "num_bits": 8, "strategy": "tensor", "symmetric": True}


@pytest.mark.parametrize("requested", [None, "auto", "compressed-tensors"])
def test_compressed_tensors_scheme_decides_the_method(requested) -> None:
    assert resolve_quantization(requested, _ct(FP8_TENSOR, FP8_TENSOR, "float-quantized")) == "fp8"
    assert resolve_quantization(requested, _ct(INT8_CHANNEL, INT8_TOKEN, "int-quantized")) == "int8"
    assert resolve_quantization(requested, _ct(INT4_GROUP)) == "wna16"  # W4A16
    assert resolve_quantization(requested, _ct(INT8_CHANNEL)) == "wna16"  # W8A16, packed 4 per int32
    assert resolve_quantization(requested, _ct(INT4_GROUP, fmt=None)) == "wna16"  # the group's own format
    # without config_groups the format alone decides
    bare = SimpleNamespace(quantization_config={"quant_method": "compressed-tensors", "format": "int-quantized"})
    assert resolve_quantization(requested, bare) == "int8"


def test_an_explicit_method_overrides_the_compressed_tensors_scheme() -> None:
    assert resolve_quantization("fp8", _ct(INT4_GROUP)) == "fp8"  # the method itself refuses what it cannot read


@pytest.mark.parametrize("weights, acts, fmt, declared", [
    ({"type": "int", "num_bits": 2}, None, "pack-quantized", "weights int 2-bit, no input activations, format pack-quantized"),
    (INT4_GROUP, INT8_TOKEN, "int-quantized", "weights int 4-bit, input activations int 8-bit"),
    (INT8_CHANNEL, FP8_TENSOR, "naive-quantized", "weights int 8-bit, input activations float 8-bit"),
    (INT4_GROUP, None, "marlin-24", "weights int 4-bit, no input activations, format marlin-24"),
    ({"type": "float", "num_bits": 4}, None, "nvfp4-pack-quantized", "weights float 4-bit"),
])
def test_unsupported_compressed_tensors_schemes_say_what_they_declare(weights, acts, fmt, declared) -> None:
    with pytest.raises(ModelLoadError) as info:
        resolve_quantization(None, _ct(weights, acts, fmt))
    message = str(info.value)
    assert f"Unsupported compressed-tensors checkpoint: it declares {declared}" in message
    for supported in ("-> fp8 (pagoda-quant-fp8)", "(W8A8-INT8) -> int8", "(W4A16, W8A16) -> wna16 (pagoda-quant-gptq)"):
        assert supported in message


def test_mixed_compressed_tensors_schemes_are_refused() -> None:
    hf = _ct(INT4_GROUP)
    hf.quantization_config["config_groups"]["group_1"] = {"targets": ["re:.*down_proj"], "weights": FP8_TENSOR,
                                                          "input_activations": FP8_TENSOR}
    with pytest.raises(ModelLoadError, match="different schemes per config group .*weights int 4-bit, no input "
                                             "activations; weights float 8-bit, input activations float 8-bit"):
        resolve_quantization(None, hf)


def test_a_format_alone_that_names_no_scheme_is_refused() -> None:
    bare = SimpleNamespace(quantization_config={"quant_method": "compressed-tensors", "format": "naive-quantized"})
    with pytest.raises(ModelLoadError, match="it declares format 'naive-quantized' and no config_groups"):
        resolve_quantization(None, bare)


def test_gptq_keeps_its_name() -> None:
    assert resolve_quantization(None, SimpleNamespace(quantization_config={"quant_method": "gptq", "bits": 4})) == "gptq"
