"""The quantization_config each method accepts, and the settings it refuses naming the fix."""

from __future__ import annotations

import pytest
import torch
from int_quantizer import Layout, quantization_config

from pagoda.errors import ModelLoadError
from pagoda.platforms.cpu import CpuPlatform
from pagoda_quant_gptq.config import GroupedIntConfig, gptq_config, wna16_config
from pagoda_quant_gptq.method import GptqMethod, Wna16Method


def test_gptq_configs_as_exported() -> None:
    autogptq = {"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": True, "static_groups": False,
                "sym": True, "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model",
                "quant_method": "gptq"}
    assert gptq_config(autogptq) == GroupedIntConfig("GPTQ", 4, 128, True, True, zero_offset=1)
    v2 = {"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": False, "checkpoint_format": "gptq_v2"}
    assert gptq_config(v2) == GroupedIntConfig("GPTQ", 8, -1, False, False, zero_offset=0)
    cfg = gptq_config({"quant_method": "gptq", "bits": 8, "group_size": 32})
    assert (cfg.pack_factor, cfg.sym_zero, cfg.groups(100), cfg.zero_offset) == (4, 128, 4, 1)


@pytest.mark.parametrize("change, message", [
    ({"bits": 3}, "bits=3: supported are 4 and 8"),
    ({"bits": 2}, "bits=2"),
    ({"group_size": 256}, "group_size=256: supported group sizes are 32, 64, 128 and -1"),
    ({"checkpoint_format": "marlin"}, "checkpoint_format 'marlin': supported are 'gptq' (v1) and 'gptq_v2'"),
    ({"lm_head": True}, "lm_head=true (a quantized LM head)"),
    ({"dynamic": {"-:.*down_proj": {}}}, "per-module settings"),
    ({"quant_method": "awq"}, "quant_method 'awq' is not 'gptq'"),
])
def test_gptq_unsupported_settings(change: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match="Unsupported GPTQ checkpoint") as info:
        gptq_config({"quant_method": "gptq", "bits": 4, "group_size": 128, **change})
    assert message in str(info.value)


def test_wna16_configs_as_exported() -> None:
    w4a16 = quantization_config(Layout("compressed-tensors", 4, 128, sym=True, act_order=True))
    assert wna16_config(w4a16) == GroupedIntConfig("compressed-tensors", 4, 128, True, True)
    channel = quantization_config(Layout("compressed-tensors", 8, -1, sym=False))
    assert wna16_config(channel) == GroupedIntConfig("compressed-tensors", 8, -1, False, False)
    weight_order = quantization_config(Layout("compressed-tensors", 4, 64))
    weight_order["config_groups"]["group_0"]["weights"]["actorder"] = "weight"  # reordered quantization, no g_idx
    assert not wna16_config(weight_order).act_order


def _ct(**weights) -> dict:
    qc = quantization_config(Layout("compressed-tensors", 4, 128))
    qc["config_groups"]["group_0"]["weights"].update(weights)
    return qc


@pytest.mark.parametrize("qc, message", [
    (_ct(num_bits=2), "weights = "),
    (_ct(type="float", num_bits=8), "int weights of 4 or 8 bits"),
    (_ct(strategy="tensor"), "weights.strategy = 'tensor'"),
    (_ct(group_size=256), "weights.group_size = 256"),
    (_ct(dynamic=True), "weights.dynamic = True"),
    (_ct(actorder="random"), "weights.actorder = 'random'"),
    ({**_ct(), "format": "marlin-24", "config_groups": {"g": {**_ct()["config_groups"]["group_0"], "format": None}}},
     "format = 'marlin-24'"),
    ({**_ct(), "ignore": ["lm_head", "re:.*down_proj"]}, "ignore = ['re:.*down_proj']"),
    ({**_ct(), "sparsity_config": {"format": "sparse-24-bitmask"}}, "sparsity_config.format"),
    ({**_ct(), "quant_method": "gptq"}, "quant_method = 'gptq'"),
])
def test_wna16_unsupported_settings(qc: dict, message: str) -> None:
    with pytest.raises(ModelLoadError, match="Unsupported compressed-tensors checkpoint") as info:
        wna16_config(qc)
    assert message in str(info.value)


def test_wna16_refuses_activations_and_mixed_schemes() -> None:
    qc = _ct()
    qc["config_groups"]["group_0"]["input_activations"] = {"type": "int", "num_bits": 8, "dynamic": True}
    with pytest.raises(ModelLoadError, match="W8A8-INT8 checkpoints are read by --quantization int8"):
        wna16_config(qc)
    qc = _ct()
    qc["config_groups"]["group_1"] = {"targets": ["re:.*down_proj"], "weights": {"type": "int", "num_bits": 8}}
    with pytest.raises(ModelLoadError, match="one weight scheme for every linear layer"):
        wna16_config(qc)


@pytest.mark.parametrize("read", [gptq_config, wna16_config])
def test_a_dense_config_says_what_is_needed(read) -> None:
    with pytest.raises(ModelLoadError, match="needs a .* checkpoint, but config.json has no quantization_config"):
        read(None)


class _Gpu:
    """A GPU platform as the methods' check sees it: an NVIDIA compute capability, or None (AMD)."""

    def __init__(self, capability: tuple[int, int] | None) -> None:
        self.capability = capability

    def compute_capability(self) -> tuple[int, int] | None:
        return self.capability

    def describe(self) -> str:
        return "Tesla V100-SXM2-16GB"


@pytest.mark.parametrize("capability, reason", [((7, 0), "gptq needs compute capability >= 7.5 (the tensor-core "
                                                         "dot of its kernels); Tesla V100-SXM2-16GB is sm_70"),
                                                ((7, 5), None), ((9, 0), None), (None, None)])
def test_gpus_too_old_for_the_kernels_are_refused(capability, reason) -> None:
    """NVIDIA GPUs below sm_75 are refused; AMD GPUs (no NVIDIA capability) run the Triton kernels."""
    assert GptqMethod.check(_Gpu(capability)) == reason
    assert Wna16Method.check(_Gpu(capability)) == (reason and reason.replace("gptq", "wna16"))
    assert GptqMethod.check(CpuPlatform()) is None
