"""DeepSeek-V3's native FP8 layout (``quant_method: fp8``, ``weight_block_size`` blocks, ``weight_scale_inv``)
through the fp8 method: every linear layer of multi-head latent attention (q LoRA, the compressed kv, ``kv_b_proj``
absorbed after its dequantization) and of the dense MLPs loads and runs; MoE experts, which the fp8 method does
not quantize, are refused naming the checkpoint's scheme."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from fp8_checkpoints import BLOCK, LAYOUTS
from hf_tiny import hf_config, hf_logits, hf_model, run_prefill
from pagoda.errors import ModelLoadError
from pagoda_quant_fp8.fp8_math import FP8_DTYPE, dequantize, dequantize_blocks, quantize_blocks, quantize_per_row
from test_fp8_checkpoints import load_fp8, pagoda_linear_weights

PROMPT = [3, 17, 42, 5, 88, 9, 61, 70, 2, 31, 11, 54]


def write_block_fp8(hf, folder: Path) -> dict[str, torch.Tensor]:
    """``hf`` saved with every linear weight but the LM head in FP8 blocks (``weight_scale_inv``); returns the
    float state dict with those weights dequantized."""
    folder.mkdir(parents=True, exist_ok=True)
    linears = {f"{name}.weight" for name, m in hf.named_modules() if isinstance(m, torch.nn.Linear)} - {"lm_head.weight"}
    tensors, dequantized = {}, {}
    for name, tensor in hf.state_dict().items():
        if name in linears:
            q, scale = quantize_blocks(tensor.float(), BLOCK)
            tensors[name], tensors[name.removesuffix("weight") + "weight_scale_inv"] = q, scale
            dequantized[name] = dequantize_blocks(q, scale, BLOCK)
        else:
            tensors[name] = dequantized[name] = tensor.contiguous()
    save_file(tensors, str(folder / "model.safetensors"))
    hf.config.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"], config["quantization_config"] = [type(hf).__name__], LAYOUTS["fp8-block"]
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return dequantized


def round_linear_inputs(hf) -> list:
    """Round the input of every HF linear layer to FP8 per token, as the fp8 method does; except kv_b_proj's
    (the absorbed form multiplies its dequantized weight into the query and the output instead) and the LM head's."""
    def hook(module, args):
        x = args[0].reshape(-1, args[0].shape[-1])
        return (dequantize(*quantize_per_row(x)).view_as(args[0]),)

    return [m.register_forward_pre_hook(hook) for name, m in hf.named_modules()
            if isinstance(m, torch.nn.Linear) and not name.endswith(("kv_b_proj", "lm_head"))]


def test_latent_attention_and_dense_layers_load_from_fp8_blocks(tmp_path: Path) -> None:
    hf = hf_model(hf_config("deepseek_v3", first_k_dense_replace=3))  # every layer dense: nothing the fp8 method refuses
    hf.load_state_dict(write_block_fp8(hf, tmp_path))  # HF runs the dequantized weights
    model, ctx = load_fp8(tmp_path)
    attn = model.model.layers[1].self_attn
    assert attn.q_a_proj.weight.dtype == attn.kv_b_proj.weight.dtype == attn.kv_a_proj_with_mqa.weight.dtype == FP8_DTYPE
    # the absorbed W_UK / W_UV: kv_b_proj's weight as the fp8 method holds it (requantized per channel at load)
    w = hf.model.layers[1].self_attn.kv_b_proj.weight.view(4, 8 + 12, 16)
    torch.testing.assert_close(attn.attn.w_uk, w[:, :8], rtol=2.0**-4, atol=1e-6)
    torch.testing.assert_close(attn.attn.w_uv, w[:, 8:].transpose(1, 2), rtol=2.0**-4, atol=1e-6)
    plain = hf_logits(hf, PROMPT)
    hf.load_state_dict(pagoda_linear_weights(model), strict=False)  # the per-channel requantized weights
    hooks = round_linear_inputs(hf)
    ours = run_prefill(model, ctx, [PROMPT])
    torch.testing.assert_close(ours, hf_logits(hf, PROMPT), rtol=0, atol=1e-4)
    assert float((ours - plain).norm() / plain.norm()) < 0.2  # FP8 activations' error
    for hook in hooks:
        hook.remove()


def test_quantized_experts_are_refused_naming_the_scheme(tmp_path: Path) -> None:
    write_block_fp8(hf_model(hf_config("deepseek_v3")), tmp_path)
    with pytest.raises(ModelLoadError, match=r"MoE experts are quantized \(quant_method 'fp8', fmt 'e4m3', "
                                             r"weight_block_size \[16, 16\]; read by Fp8Method\)"):
        load_fp8(tmp_path)
