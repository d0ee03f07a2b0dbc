"""INT8 W8A8 checkpoints (compressed-tensors int-quantized, as llm-compressor writes them) and float checkpoints
quantized at load: detected from config.json, loaded, and generating on CPU (``torch._int_mm``, the CPU
engine's path) the same greedy tokens as HF transformers running the dequantized weights with its linear
inputs rounded to int8 the same way; through the engine too, with tensor parallelism, and with FP8 KV scales."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from fp8_checkpoints import INT8_LAYOUTS, fake_quant_hooks, write_fp8
from hf_tiny import hf_config, hf_model
from pagoda.errors import ModelLoadError
from pagoda.loader import ModelSource, load_hf_config
from pagoda.quantization.select import resolve_quantization
from pagoda_quant_fp8.int8_method import Int8Method
from pagoda_quant_fp8.scheme import parse_int8_scheme
from test_fp8_checkpoints import PROMPTS, greedy, hf_greedy, load_fp8


@pytest.fixture(scope="module")
def llama():
    return hf_model(hf_config("llama"))


def load_int8(folder: Path, backend: str = "torch"):
    """(model, ctx) for an INT8 (or float, then quantized online) checkpoint through Pagoda's loader."""
    return load_fp8(folder, backend, Int8Method)


def int8_weights(model) -> dict[str, torch.Tensor]:
    """HF-named float weights of Pagoda's INT8 linear layers (fused layers split into their shards)."""
    fused = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
    out = {}
    for name, module in model.named_modules():
        if getattr(module, "weight", None) is not None and module.weight.dtype == torch.int8:
            parent, _, leaf = name.rpartition(".")
            dense = module.weight.data.float() * module.weight_scale.data.t()
            for shard, part in zip(fused.get(leaf, (leaf,)), dense.split(module.output_sizes)):
                out[f"{parent}.{shard}.weight"] = part
    return out


def assert_generates_like_hf(model, ctx, hf, layout: str, folder: Path | None) -> None:
    hooks = fake_quant_hooks(hf, layout, folder)
    try:
        for prompt in PROMPTS:
            tokens, logits = greedy(model, ctx, prompt)
            expected, hf_logits = hf_greedy(hf, prompt)
            assert tokens == expected, layout
            torch.testing.assert_close(logits, hf_logits, rtol=0, atol=1e-4)
    finally:
        for hook in hooks:
            hook.remove()


@pytest.mark.parametrize("layout", list(INT8_LAYOUTS))
def test_int8_checkpoint_generates_like_its_dequantized_weights(layout: str, llama, tmp_path: Path) -> None:
    dequantized = write_fp8(llama, tmp_path, layout, PROMPTS)
    assert resolve_quantization(None, load_hf_config(ModelSource(tmp_path, None, "t"))) == "int8"
    model, ctx = load_int8(tmp_path)
    qkv = model.model.layers[1].self_attn.qkv_proj
    assert qkv.weight.dtype == torch.int8 and qkv.weight_scale.shape == (1, qkv.out_features)
    expected_qkv = torch.cat([dequantized[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv"])
    torch.testing.assert_close(qkv.weight.float() * qkv.weight_scale.t(), expected_qkv, rtol=1e-6, atol=0)  # exact
    hf = copy.deepcopy(llama)
    hf.load_state_dict(dequantized)
    assert_generates_like_hf(model, ctx, hf, layout, tmp_path)


def test_online_quantization_of_a_float_checkpoint(llama, tmp_path: Path) -> None:
    """--quantization int8 on a float checkpoint: per-channel int8 weights, per-token int8 activations."""
    llama.save_pretrained(tmp_path)
    model, ctx = load_int8(tmp_path)
    weights = int8_weights(model)
    assert len(weights) == 7 * len(model.model.layers)
    for name, dense in weights.items():  # within half an int8 step of each channel's largest weight
        w = llama.get_parameter(name).data
        assert bool(((dense - w).abs() <= w.abs().amax(1, keepdim=True) / 254 * 1.0001).all())
    hf = copy.deepcopy(llama)
    hf.load_state_dict(weights, strict=False)
    assert_generates_like_hf(model, ctx, hf, "int8-online", None)


def test_engine_detects_int8_and_generates_on_cpu(llama, tmp_path: Path) -> None:
    from pagoda import LLM, SamplingParams

    write_fp8(llama, tmp_path, "int8-channel-token", PROMPTS)
    llm = LLM(model=str(tmp_path), platform="cpu", skip_tokenizer_init=True, dtype="float32")
    assert isinstance(llm.engine.core.parts.model.model.layers[0].self_attn.qkv_proj.quant_method, Int8Method)
    outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], SamplingParams(max_tokens=8, temperature=0),
                        use_tqdm=False)
    model, ctx = load_int8(tmp_path)
    assert [o.outputs[0].token_ids for o in outs] == [greedy(model, ctx, p)[0] for p in PROMPTS]


@pytest.mark.gpu
def test_gpu_engine_generates_like_the_cpu_path(llama, tmp_path: Path) -> None:
    """On a GPU the engine runs the Triton GEMM and the fused quantizers; in float32 its greedy tokens equal
    the CPU path's (torch._int_mm) and its logprobs agree to the int8 rounding of a few activations."""
    from pagoda import LLM, SamplingParams

    write_fp8(llama, tmp_path, "int8-channel-token", PROMPTS)
    runs = []
    for platform in ("cpu", "cuda"):
        llm = LLM(model=str(tmp_path), platform=platform, skip_tokenizer_init=True, dtype="float32",
                  attention_backend="torch")  # the tiny model's head size 12 is below the GPU kernels' sizes
        assert llm.engine.core.parts.model.model.layers[0].mlp.down_proj.quant_method.backend == (
            "torch" if platform == "cpu" else "triton")
        runs.append(llm.generate([{"prompt_token_ids": p} for p in PROMPTS],
                                 SamplingParams(max_tokens=8, temperature=0, logprobs=0), use_tqdm=False))
    for cpu, gpu in zip(*runs):
        assert gpu.outputs[0].token_ids == cpu.outputs[0].token_ids
        lp = [torch.tensor([next(iter(d.values())).logprob for d in o.outputs[0].logprobs]) for o in (cpu, gpu)]
        assert (lp[0] - lp[1]).abs().max() < 0.05


def test_fp8_kv_cache_scales_of_an_int8_checkpoint(llama, tmp_path: Path) -> None:
    """kv_cache_scheme's k_scale / v_scale are loaded into the attention layers and used with --kv-cache-dtype fp8."""
    from pagoda import LLM, SamplingParams
    from pagoda.layers.attention import Attention

    write_fp8(llama, tmp_path, "int8-channel-token-kv", PROMPTS)
    params = SamplingParams(max_tokens=1, prompt_logprobs=0)
    runs = {}
    for kv in ("auto", "fp8"):
        llm = LLM(model=str(tmp_path), platform="cpu", skip_tokenizer_init=True, dtype="float32", kv_cache_dtype=kv,
                  attention_backend="torch")
        layers = [m for m in llm.engine.core.parts.model.modules() if isinstance(m, Attention)]
        assert all(0 < a.kv_scales.k_scale.item() < 1 and 0 < a.kv_scales.v_scale.item() < 1 for a in layers)
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], params, use_tqdm=False)
        runs[kv] = torch.tensor([lp[t].logprob for o, p in zip(outs, PROMPTS)
                                 for t, lp in zip(p[1:], o.prompt_logprobs[1:])])
    diff = (runs["fp8"] - runs["auto"]).abs()
    assert 0 < diff.max() < 0.15  # the FP8 KV bound of docs/kv_cache_fp8.md


@pytest.mark.parametrize("config,match", [
    ({**INT8_LAYOUTS["int8-channel-token"], "format": "float-quantized"},
     "format = 'float-quantized'.*--quantization fp8"),
    ({"quant_method": "awq", "bits": 4}, "quant_method 'awq'.*--quantization awq"),
    ({**INT8_LAYOUTS["int8-channel-token"], "config_groups": {"g": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "group", "group_size": 128, "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}},
     "strategy tensor, channel"),
    ({**INT8_LAYOUTS["int8-channel-token"], "config_groups": {"g": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True,
                              "symmetric": False}}}},
     "symmetric activations"),
    ({**INT8_LAYOUTS["int8-channel-token"], "config_groups": {"g": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True}}}},
     "weight-only INT8 is not"),
])
def test_unsupported_int8_schemes_are_named(config: dict, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        parse_int8_scheme(config)
