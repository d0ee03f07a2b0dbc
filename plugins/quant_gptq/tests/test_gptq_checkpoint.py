"""Tiny Llama checkpoints written in each layout, loaded and run on CPU: greedy tokens equal those of
the same model with the dequantized weights in fp32 (Pagoda, and HF transformers), logprobs within
1e-4; the method is detected from config.json; mismatches and unsupported settings fail clearly."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from awq_quantizer import logprob_gap
from int_quantizer import Layout, quantization_config
from tiny_checkpoints import write_tiny_llama

from tiny_models import CONFIGS, hf_greedy, random_prompts  # noqa: E402  (conftest puts tests/engine on the path)

import pagoda.plugins.manager as manager  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.errors import ModelLoadError, UnknownChoiceError  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402
from pagoda_quant_gptq.method import GptqMethod, Wna16Method  # noqa: E402

CPU = dict(dtype="float32", platform="cpu", block_size=16, max_num_batched_tokens=32)
LAYOUTS = [
    Layout("gptq", 4, 32, sym=True),  # the common export: int4 g128-like, no act-order
    Layout("gptq", 4, 32, sym=False, act_order=True),  # act-order, v1 zero points
    Layout("gptq", 8, 64, sym=True, act_order=True),
    Layout("gptq", 8, -1, sym=False, v1=False),  # per channel, gptq_v2
    Layout("compressed-tensors", 4, 32, sym=True, scale_dtype=torch.bfloat16),  # W4A16 group
    Layout("compressed-tensors", 4, -1, sym=False),  # W4A16 channel, asymmetric
    Layout("compressed-tensors", 8, 32, sym=False, act_order=True),  # W8A16, actorder group
]


@pytest.fixture(autouse=True)
def _plugins_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process-wide manager with the built-ins plus this plugin (installed or not)."""
    modules = {"quant-gptq": importlib.import_module("pagoda_quant_gptq.plugin")}
    monkeypatch.setattr(manager, "_MANAGER", PluginManager(modules=modules, entry_points=False))


@pytest.fixture(scope="module", params=LAYOUTS, ids=str)
def checkpoints(request, tmp_path_factory: pytest.TempPathFactory):
    """(layout, quantized folder, dequantized dense folder, HF model holding the dequantized weights)."""
    layout = request.param
    return (layout, *write_tiny_llama(tmp_path_factory.mktemp(str(layout)), layout))


def _greedy(llm: LLM, prompts: list[list[int]], n: int) -> list[list[int]]:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=n), use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


def _layer(llm: LLM, name: str):
    return dict(llm.engine.core.parts.model.named_modules())[name]


def test_checkpoint_generates_like_its_dequantized_weights(checkpoints) -> None:
    layout, quant, dense, hf_model = checkpoints
    prompts = random_prompts(3, range(4, 40), seed=7)  # a 32-token budget chunks the longer prompts
    quantized = LLM(model=str(quant), **CPU)  # no --quantization: detected from config.json
    method = GptqMethod if layout.fmt == "gptq" else Wna16Method
    layer = _layer(quantized, "model.layers.0.mlp.down_proj")  # 128 inputs: several groups
    assert isinstance(layer.quant_method, method)
    assert (layer.int4_index is not None) == layout.act_order, "act-order layers gather their input once"
    got = _greedy(quantized, prompts, 8)
    assert got == _greedy(LLM(model=str(dense), **CPU), prompts, 8)
    assert got == [hf_greedy(hf_model, p, 8)[0] for p in prompts]
    assert len({t for seq in got for t in seq}) > 3, "the test needs varied tokens to mean anything"
    assert logprob_gap(quant, dense, [5, 17, 99, 3, 42, 7], 8, **CPU) < 1e-4


def test_flags_and_unsupported_settings_fail_clearly(tmp_path: Path) -> None:
    quant, dense, _ = write_tiny_llama(tmp_path, Layout("gptq", 4, 32))
    with pytest.raises(ModelLoadError, match="--quantization gptq needs a GPTQ checkpoint, but config.json has no "
                                             "quantization_config.*llama-3.1-8b-gptq"):
        LLM(model=str(dense), quantization="gptq", **CPU)
    with pytest.raises(ModelLoadError, match="quant_method 'gptq' is not 'compressed-tensors'|quant_method = 'gptq'"):
        LLM(model=str(quant), quantization="wna16", **CPU)
    copy = tmp_path / "gptq3"
    shutil.copytree(quant, copy)
    config = json.loads((copy / "config.json").read_text())
    config["quantization_config"]["bits"] = 3
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="bits=3: supported are 4 and 8"):
        LLM(model=str(copy), **CPU)


def test_without_the_plugin_the_error_names_the_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quant, _, _ = write_tiny_llama(tmp_path, Layout("compressed-tensors", 4, 32))
    monkeypatch.setattr(manager, "_MANAGER", PluginManager(modules={}, entry_points=False))
    with pytest.raises(UnknownChoiceError, match="'wna16' is provided by the plugin distribution pagoda-quant-gptq"):
        LLM(model=str(quant), **CPU)


@pytest.mark.parametrize("layout", [Layout("gptq", 4, 128, sym=True), Layout("compressed-tensors", 4, 32)], ids=str)
def test_dummy_weights_from_a_config(tmp_path: Path, layout: Layout) -> None:
    config = CONFIGS["llama"]()
    config.quantization_config = quantization_config(layout)  # a config alone: random packed weights
    config.save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), load_format="dummy", skip_tokenizer_init=True, **CPU)
    layer = _layer(llm, "model.layers.0.mlp.down_proj")
    assert layer.int4_qweight.shape == (128, 64 // 8) and layer.int4_group == layout.group
    out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3


def test_a_checkpoint_without_g_idx_names_the_missing_tensors(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    quant, _, _ = write_tiny_llama(tmp_path, Layout("gptq", 4, 32, act_order=True))
    tensors = load_file(str(quant / "model.safetensors"))
    save_file({k: v for k, v in tensors.items() if not k.endswith(".g_idx")}, str(quant / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"lacks 14 tensor\(s\) .*model.layers.0.mlp.down_proj.g_idx"):
        LLM(model=str(quant), **CPU)
