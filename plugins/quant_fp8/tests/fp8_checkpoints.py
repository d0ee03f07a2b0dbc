"""Write tiny FP8 and INT8 W8A8 checkpoints in the layouts serving users have, from a float HF model.

``write_fp8(hf_model, folder, layout, calibration)`` saves the checkpoint (config.json with its
``quantization_config`` + model.safetensors) and returns the float32 state dict whose linear
weights are the dequantized ones (the "same model with dequantized weights"). ``LAYOUTS`` are FP8's,
``INT8_LAYOUTS`` compressed-tensors' int-quantized W8A8 (llm-compressor's W8A8 INT8 recipes).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from pagoda_quant_fp8.formats import FP8, INT8, QuantFormat
from pagoda_quant_fp8.fp8_math import dequantize, dequantize_blocks, quantize_blocks

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BLOCK = (16, 16)


def _ct(weights: dict, acts: dict | None, num_type: str = "float") -> dict:
    fmt = "float-quantized" if num_type == "float" else "int-quantized"
    return {"quant_method": "compressed-tensors", "format": fmt, "ignore": ["lm_head"],
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 8, "type": num_type,
                                                                            "symmetric": True, "dynamic": False,
                                                                            **weights},
                                          "input_activations": acts}}}


def _acts(strategy: str, dynamic: bool, num_type: str = "float") -> dict:
    return {"num_bits": 8, "type": num_type, "symmetric": True, "strategy": strategy, "dynamic": dynamic}


LAYOUTS: dict[str, dict] = {
    "fp8-tensor-dynamic": {"quant_method": "fp8", "activation_scheme": "dynamic"},
    "fp8-tensor-static": {"quant_method": "fp8", "activation_scheme": "static"},
    "fp8-block": {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                  "weight_block_size": list(BLOCK)},
    "ct-channel-token": _ct({"strategy": "channel"}, _acts("token", True)),
    "ct-tensor-static": _ct({"strategy": "tensor"}, _acts("tensor", False)),
    "ct-tensor-dynamic": _ct({"strategy": "tensor"}, _acts("tensor", True)),
    "ct-block": _ct({"strategy": "block", "block_structure": list(BLOCK)}, _acts("group", True) | {"group_size": 16}),
}
KV_CACHE_SCHEME = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
INT8_LAYOUTS: dict[str, dict] = {
    "int8-channel-token": _ct({"strategy": "channel"}, _acts("token", True, "int"), "int"),
    "int8-tensor-token": _ct({"strategy": "tensor"}, _acts("token", True, "int"), "int"),
    "int8-channel-static": _ct({"strategy": "channel"}, _acts("tensor", False, "int"), "int"),
    "int8-tensor-dynamic": _ct({"strategy": "tensor"}, _acts("tensor", True, "int"), "int"),
    "int8-channel-token-kv": {**_ct({"strategy": "channel"}, _acts("token", True, "int"), "int"),
                              "kv_cache_scheme": KV_CACHE_SCHEME},  # + k_scale / v_scale per attention block
}


def format_of(layout: str) -> QuantFormat:
    return INT8 if layout.startswith("int8") else FP8


def _quantize(w: torch.Tensor, layout: str) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """One linear weight [N, K] -> (checkpoint tensors by suffix, dequantized float32 weight)."""
    if layout.endswith("block"):
        q, scale = quantize_blocks(w, BLOCK)
        name = "weight_scale_inv" if layout.startswith("fp8") else "weight_scale"
        return {"weight": q, name: scale}, dequantize_blocks(q, scale, BLOCK)
    fmt = format_of(layout)
    if "channel" in layout:
        q, scale = fmt.per_row(w)  # [N, 1], as compressed-tensors stores channel scales
        return {"weight": q, "weight_scale": scale}, dequantize(q, scale)
    q, scale = fmt.per_tensor(w)
    scale = scale if layout.startswith("fp8") else scale.reshape(1)  # [] (fp8 exports) or [1] (compressed-tensors)
    return {"weight": q, "weight_scale": scale}, dequantize(q, scale)


@torch.no_grad()
def input_amax(hf_model, prompts: list[list[int]], outputs: bool = False) -> dict[str, float]:
    """Largest |input| (``outputs``: |output|) of each linear module over ``prompts`` (static calibration)."""
    amax: dict[str, float] = {}
    hooks = [module.register_forward_hook(lambda m, args, out, n=name: amax.__setitem__(
        n, max(amax.get(n, 0.0), float((out if outputs else args[0]).abs().max()))))
        for name, module in hf_model.named_modules() if name.rpartition(".")[2] in LINEARS]
    for prompt in prompts:
        hf_model(torch.tensor([prompt]))
    for hook in hooks:
        hook.remove()
    return amax


def write_fp8(hf_model, folder: Path, layout: str, calibration: list[list[int]]) -> dict[str, torch.Tensor]:
    """Save ``hf_model`` as an FP8 checkpoint of ``layout``; return the dequantized float state dict."""
    folder.mkdir(parents=True, exist_ok=True)
    amax = input_amax(hf_model, calibration) if layout.endswith("static") else {}
    tensors, dequantized = {}, {}
    for name, tensor in hf_model.state_dict().items():
        module = name.removesuffix(".weight")
        if name.endswith(".weight") and module.rpartition(".")[2] in LINEARS:
            parts, deq = _quantize(tensor.float(), layout)
            tensors.update({f"{module}.{suffix}": t.contiguous() for suffix, t in parts.items()})
            if module in amax:
                scale = torch.tensor(amax[module] * 1.25 / format_of(layout).qmax)  # headroom above the calibration max
                tensors[f"{module}.input_scale"] = scale if layout.startswith("fp8") else scale.reshape(1)
            dequantized[name] = deq
        else:
            tensors[name] = dequantized[name] = tensor.contiguous()
    if layout.endswith("-kv"):  # per-tensor FP8 KV cache scales from the k/v projections' outputs, some headroom
        out_amax = input_amax(hf_model, calibration, outputs=True)
        for module, value in out_amax.items():
            parent, _, leaf = module.rpartition(".")
            if leaf in ("k_proj", "v_proj"):
                tensors[f"{parent}.{leaf[0]}_scale"] = torch.tensor(value * 1.25 / 448)
    save_file(tensors, str(folder / "model.safetensors"))
    hf_model.config.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {**LAYOUTS, **INT8_LAYOUTS}[layout]
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return dequantized


def activation_mode(layout: str) -> str:
    """How ``layout`` quantizes linear inputs: per token, per tensor (dynamic) or static."""
    if layout.endswith("static"):
        return "static"
    return "tensor" if "tensor" in layout and not layout.endswith("token") else "token"


SHARED_INPUT = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up"}


def fake_quant_hooks(hf_model, layout: str, checkpoint: Path | None = None) -> list:
    """Round every linear input of ``hf_model`` to FP8 (INT8) the way ``layout`` does (an independent emulation).

    Static scales come from the checkpoint; projections that read the same input (q/k/v, gate/up)
    share the largest of their scales. Per-tensor scales span the whole forward's tokens.
    """
    from safetensors.torch import load_file

    mode, fmt = activation_mode(layout), format_of(layout)
    stored = load_file(str(checkpoint / "model.safetensors")) if mode == "static" else {}
    shared: dict[str, float] = {}
    for name, tensor in stored.items():
        if name.endswith(".input_scale"):
            module = name.removesuffix(".input_scale")
            parent, _, leaf = module.rpartition(".")
            key = f"{parent}.{SHARED_INPUT.get(leaf, leaf)}"
            shared[key] = max(shared.get(key, 0.0), float(tensor))

    def hook(module, args, name):
        x = args[0].reshape(-1, args[0].shape[-1])  # [tokens, K]
        if mode == "token":
            q, s = fmt.per_row(x)
        elif mode == "tensor":
            q, s = fmt.per_tensor(x)
        else:
            parent, _, leaf = name.rpartition(".")
            s = torch.tensor(shared[f"{parent}.{SHARED_INPUT.get(leaf, leaf)}"])
            q = fmt.with_scale(x, s)
        return (dequantize(q, s).view_as(args[0]),)

    return [module.register_forward_pre_hook(lambda m, a, n=name: hook(m, a, n))
            for name, module in hf_model.named_modules() if name.rpartition(".")[2] in LINEARS]
