"""FP8 checkpoints in each layout: detected from config.json, loaded, and generating on CPU (reference
path) the same greedy tokens as the same model with the dequantized weights; clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fp8_checkpoints import LAYOUTS, fake_quant_hooks, write_fp8
from hf_tiny import BLOCK_SIZE, hf_config, hf_model, run_prefill
from pagoda.attention.torch_ref import TorchAttentionBackend
from pagoda.errors import IncompatibleChoiceError, ModelLoadError
from pagoda.interfaces import BuildContext
from pagoda.interfaces.ops import CustomOps
from pagoda.loader import ModelSource, load_hf_config, load_model
from pagoda.models import model_class
from pagoda.models.spec import attention_spec
from pagoda.platforms.cpu import CpuPlatform
from pagoda.quantization.select import resolve_quantization
from pagoda_quant_fp8.fp8_math import FP8_DTYPE, dequantize
from pagoda_quant_fp8.method import Fp8Method
from pagoda_quant_fp8.scheme import parse_scheme
from scaled_mm_support import needs_cpu_rowwise_scaled_mm

PROMPTS = [[3, 17, 42, 5, 88, 9, 61], [70, 2, 2, 31], [11, 54, 23, 94, 40, 7, 19, 66, 1, 38]]
STEPS = 8


@pytest.fixture(scope="module")
def llama():
    return hf_model(hf_config("llama"))


def load_fp8(folder: Path, backend: str = "reference", method_cls=Fp8Method):
    """(model, ctx) for an FP8 (or ``method_cls``'s: INT8) or a float checkpoint (then quantized online)
    through Pagoda's loader."""
    source = ModelSource(folder, None, "tiny")
    config = load_hf_config(source)
    method = method_cls(getattr(config, "quantization_config", None), backend=backend)
    spec = attention_spec(config, BLOCK_SIZE, torch.float32)
    ctx = BuildContext(torch.float32, quant_method=method, ops=CustomOps(),
                       attention=TorchAttentionBackend(spec, CpuPlatform()))
    return load_model(source, config, ctx, model_class(config.architectures[0]), "auto", "cpu", progress=False), ctx


def greedy(model, ctx, prompt: list[int], steps: int = STEPS) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens (recomputing the whole sequence each step) and the prompt's logits."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(run_prefill(model, ctx, [seq])[-1].argmax()))
    return seq[len(prompt):], run_prefill(model, ctx, [prompt])


def _dense_weight(layer) -> torch.Tensor:
    scale = layer.weight_scale.data
    return dequantize(layer.weight.data, scale.t() if scale.dim() else scale)


FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def pagoda_linear_weights(model) -> dict[str, torch.Tensor]:
    """HF-named float weights of Pagoda's FP8 linear layers (fused layers split into their shards)."""
    out = {}
    for name, module in model.named_modules():
        if hasattr(module, "fp8_rowwise"):
            parent, _, leaf = name.rpartition(".")
            parts = _dense_weight(module).split(module.output_sizes)
            for shard, part in zip(FUSED.get(leaf, (leaf,)), parts):
                out[f"{parent}.{shard}.weight"] = part
    return out


@torch.no_grad()
def hf_greedy(hf, prompt: list[int], steps: int = STEPS) -> tuple[list[int], torch.Tensor]:
    """HF's greedy tokens (whole sequence each step, like :func:`greedy`) and the prompt's logits."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
    return seq[len(prompt):], hf(torch.tensor([prompt])).logits[0]


@pytest.fixture
def hf_dequantized(llama):
    """A copy of the HF model to load dequantized weights into (and hook)."""
    import copy

    return copy.deepcopy(llama)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_fp8_checkpoint_generates_like_its_dequantized_weights(layout: str, llama, hf_dequantized,
                                                               tmp_path: Path) -> None:
    """Pagoda's FP8 model == HF transformers with the dequantized weights and FP8-rounded linear inputs."""
    dequantized = write_fp8(llama, tmp_path, layout, PROMPTS)
    assert resolve_quantization(None, load_hf_config(ModelSource(tmp_path, None, "t"))) == "fp8"
    model, ctx = load_fp8(tmp_path)
    attn = model.model.layers[1].self_attn
    assert attn.qkv_proj.weight.dtype == FP8_DTYPE
    qkv = torch.cat([dequantized[f"model.layers.1.self_attn.{p}_proj.weight"] for p in "qkv"])
    if layout.endswith("block"):  # requantized per channel at load: one more e4m3 rounding
        torch.testing.assert_close(_dense_weight(attn.qkv_proj), qkv, rtol=2.0**-4, atol=1e-6)
    else:  # the checkpoint's FP8 values and scales, exactly
        torch.testing.assert_close(_dense_weight(attn.qkv_proj), qkv, rtol=1e-6, atol=0)
    hf_dequantized.load_state_dict(dequantized)
    plain = [hf_greedy(hf_dequantized, p)[1] for p in PROMPTS]  # no activation rounding
    if layout.endswith("block"):  # Pagoda runs the weights requantized per channel: give HF the same
        hf_dequantized.load_state_dict(pagoda_linear_weights(model), strict=False)
    hooks = fake_quant_hooks(hf_dequantized, layout, tmp_path)
    for prompt, plain_logits in zip(PROMPTS, plain):
        tokens, logits = greedy(model, ctx, prompt)
        expected, hf_logits = hf_greedy(hf_dequantized, prompt)
        assert tokens == expected, layout
        torch.testing.assert_close(logits, hf_logits, rtol=0, atol=1e-4)
        assert float((logits - plain_logits).norm() / plain_logits.norm()) < 0.2  # FP8 activations' error
    for hook in hooks:
        hook.remove()


def test_online_quantization_of_a_float_checkpoint(llama, hf_dequantized, tmp_path: Path) -> None:
    """--quantization fp8 on a float checkpoint: per-channel FP8 weights (a quarter of float32's bytes),
    generating like HF with those weights and per-token FP8-rounded linear inputs."""
    llama.save_pretrained(tmp_path)
    model, ctx = load_fp8(tmp_path)
    for name, module in model.named_modules():
        if hasattr(module, "fp8_rowwise"):
            assert module.weight.dtype == FP8_DTYPE and module.weight_scale.shape == (1, module.out_features)
            assert not [n for n, _ in module.named_parameters() if n not in ("weight", "weight_scale", "bias")]
    hf_weights = pagoda_linear_weights(model)
    for name, dense in hf_weights.items():  # within half an e4m3 ulp of the float weights
        torch.testing.assert_close(dense, llama.get_parameter(name).data, rtol=2.0**-4, atol=1e-6)
    hf_dequantized.load_state_dict(hf_weights, strict=False)
    hooks = fake_quant_hooks(hf_dequantized, "online")
    for prompt in PROMPTS:
        tokens, logits = greedy(model, ctx, prompt)
        expected, hf_logits = hf_greedy(hf_dequantized, prompt)
        assert tokens == expected
        torch.testing.assert_close(logits, hf_logits, rtol=0, atol=1e-4)
    for hook in hooks:
        hook.remove()


@needs_cpu_rowwise_scaled_mm
def test_scaled_mm_backend_matches_reference_on_a_checkpoint(llama, tmp_path: Path) -> None:
    """The engine's kernel (torch._scaled_mm; torch runs it on CPU too) on a loaded checkpoint."""
    write_fp8(llama, tmp_path, "fp8-tensor-static", PROMPTS)
    (model, ctx), (ref, ref_ctx) = load_fp8(tmp_path, "torch"), load_fp8(tmp_path, "reference")
    torch.testing.assert_close(run_prefill(model, ctx, PROMPTS[:2]), run_prefill(ref, ref_ctx, PROMPTS[:2]),
                               rtol=1e-4, atol=1e-4)


def test_cpu_engine_detects_fp8_and_refuses_it(llama, tmp_path: Path) -> None:
    from pagoda import LLM

    write_fp8(llama, tmp_path, "ct-channel-token", PROMPTS)
    with pytest.raises(IncompatibleChoiceError, match="fp8 needs compute capability >= 8.9"):
        LLM(model=str(tmp_path), platform="cpu", skip_tokenizer_init=True)  # also where a GPU is present


CT = LAYOUTS["ct-channel-token"]
GROUP = CT["config_groups"]["group_0"]


def _ct_with(**group) -> dict:
    return {**CT, "config_groups": {"g": {**GROUP, **group}}}


@pytest.mark.parametrize("config,match", [
    ({"quant_method": "awq", "bits": 4}, "quant_method 'awq'.*--quantization awq"),
    ({"quant_method": "fp8", "fmt": "e5m2"}, "fmt = 'e5m2'"),
    ({"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}, "dynamic activations"),
    ({**CT, "format": "pack-quantized"}, "format = 'pack-quantized'"),
    ({**CT, "kv_cache_scheme": {"num_bits": 8, "type": "int"}}, "kv_cache_scheme.*static per-tensor 8-bit float"),
    ({**CT, "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "head"}}, "kv_cache_scheme"),
    ({**CT, "format": "int-quantized"}, "format = 'int-quantized'.*--quantization int8"),
    ({**CT, "ignore": ["lm_head", "re:.*down_proj"]}, "only lm_head unquantized"),
    ({"quant_method": "fp8", "ignored_layers": ["model.layers.0.mlp.down_proj"]}, "ignored_layers.*only lm_head"),
    ({**CT, "sparsity_config": {"format": "sparse-24-bitmask"}}, "sparsity_config.format"),
    (_ct_with(weights={"num_bits": 4, "type": "int", "strategy": "group"}), "8-bit float"),
    (_ct_with(input_activations=None), "weight-only FP8 is not"),
    (_ct_with(input_activations={"num_bits": 8, "type": "float", "strategy": "token", "dynamic": False}),
     "static per-tensor"),
])
def test_unsupported_schemes_are_named(config: dict, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        parse_scheme(config)


def test_block_shards_must_be_whole_blocks() -> None:
    from pagoda.layers.linear import MergedLinear

    method = Fp8Method({"quant_method": "fp8", "weight_block_size": [16, 16]}, backend="reference")
    with pytest.raises(ModelLoadError, match="whole number of blocks"):
        MergedLinear(32, {"gate": 24, "up": 24}, bias=False, quant_method=method, dtype=torch.float32)
