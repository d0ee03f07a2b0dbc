"""A tiny AWQ Llama checkpoint (written by the test quantizer) loaded and run on CPU: greedy tokens
equal those of the same model with the dequantized weights in fp32 (Pagoda and HF transformers);
fused q/k/v and gate/up layers load the packed tensors shard by shard; mismatches fail clearly."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch
from awq_quantizer import awq_quantization_config, logprob_gap, write_tiny_awq_llama

from tiny_models import CONFIGS, hf_greedy, random_prompts  # noqa: E402  (conftest puts tests/engine on the path)

import pagoda.plugins.manager as manager  # noqa: E402
from pagoda import LLM, SamplingParams  # noqa: E402
from pagoda.errors import IncompatibleChoiceError, ModelLoadError  # noqa: E402
from pagoda.plugins.manager import PluginManager  # noqa: E402
from pagoda_quant_awq.method import AwqMethod  # noqa: E402

GROUP = 32
CPU = dict(dtype="float32", platform="cpu", block_size=16, max_num_batched_tokens=32)


@pytest.fixture(autouse=True)
def _awq_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process-wide manager with the built-ins plus this plugin (installed or not)."""
    pm = PluginManager(modules={"quant-awq": importlib.import_module("pagoda_quant_awq.plugin")}, entry_points=False)
    monkeypatch.setattr(manager, "_MANAGER", pm)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory):
    """(awq folder, dequantized dense folder, HF model holding the dequantized weights)."""
    return write_tiny_awq_llama(tmp_path_factory.mktemp("awq-llama"), GROUP)


def _greedy(llm: LLM, prompts: list[list[int]], n: int) -> list[list[int]]:
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=n), use_tqdm=False)
    return [o.outputs[0].token_ids for o in outs]


def _layer(llm: LLM, name: str):
    return dict(llm.engine.core.parts.model.named_modules())[name]


def test_awq_checkpoint_generates_like_its_dequantized_weights(checkpoints) -> None:
    awq, dense, hf_model = checkpoints
    prompts = random_prompts(3, range(4, 40), seed=7)  # a 32-token budget chunks the longer prompts
    quantized = LLM(model=str(awq), **CPU)  # no --quantization: detected from config.json
    assert isinstance(_layer(quantized, "model.layers.0.self_attn.qkv_proj").quant_method, AwqMethod)
    got = _greedy(quantized, prompts, 8)
    assert got == _greedy(LLM(model=str(dense), **CPU), prompts, 8)
    assert got == [hf_greedy(hf_model, p, 8)[0] for p in prompts]
    assert len({t for seq in got for t in seq}) > 3, "the test needs varied tokens to mean anything"


def test_logprobs_match_the_dequantized_weights(checkpoints) -> None:
    awq, dense, _ = checkpoints
    assert logprob_gap(awq, dense, [5, 17, 99, 3, 42, 7], 8, **CPU) < 1e-4


def test_fused_layers_load_packed_shards(checkpoints) -> None:
    from safetensors.torch import load_file

    awq, _, _ = checkpoints
    tensors = load_file(str(awq / "model.safetensors"))
    llm = LLM(model=str(awq), quantization="awq", **CPU)
    for fused, parts in (("self_attn.qkv_proj", ("q_proj", "k_proj", "v_proj")), ("mlp.gate_up_proj", ("gate_proj", "up_proj"))):
        layer = _layer(llm, f"model.layers.1.{fused}")
        parent = fused.split(".")[0]
        for param in ("qweight", "qzeros", "scales"):
            expected = torch.cat([tensors[f"model.layers.1.{parent}.{p}.{param}"] for p in parts], dim=1)
            assert torch.equal(getattr(layer, param).data, expected.to(getattr(layer, param).dtype)), (fused, param)


def test_mismatched_flag_and_checkpoint_fail_clearly(checkpoints) -> None:
    awq, dense, _ = checkpoints
    with pytest.raises(IncompatibleChoiceError, match="--quantization none cannot load this checkpoint: it is quantized with 'awq'"):
        LLM(model=str(awq), quantization="none", **CPU)
    with pytest.raises(ModelLoadError, match="--quantization awq needs an AWQ checkpoint, but config.json has no quantization_config"):
        LLM(model=str(dense), quantization="awq", **CPU)


def test_unsupported_checkpoint_settings_fail_clearly(checkpoints, tmp_path: Path) -> None:
    import shutil

    awq, _, _ = checkpoints
    copy = tmp_path / "awq8"
    shutil.copytree(awq, copy)
    config = json.loads((copy / "config.json").read_text())
    config["quantization_config"]["bits"] = 8
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="bits=8: only 4-bit AWQ weights are supported"):
        LLM(model=str(copy), **CPU)


def test_dummy_weights_from_an_awq_config(tmp_path: Path) -> None:
    config = CONFIGS["llama"]()
    config.quantization_config = awq_quantization_config(64)  # a config alone: random packed weights
    config.save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), load_format="dummy", skip_tokenizer_init=True, **CPU)
    layer = _layer(llm, "model.layers.0.mlp.down_proj")
    assert isinstance(layer.quant_method, AwqMethod)
    assert layer.qweight.shape == (128, 64 // 8) and layer.scales.shape == (2, 64)
    out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3), use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == 3
