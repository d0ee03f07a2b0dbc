"""Tiny Llama checkpoints in every layout the tests cover, beside the same model with the dequantized
weights in fp32 (the reference the quantized model must reproduce). The writer is pagoda-quant-awq's
test helper, given this directory's quantizer."""

from __future__ import annotations

import zlib
from pathlib import Path

import torch
from awq_quantizer import write_quantized_checkpoint, write_tiny_pair
from int_quantizer import Layout, checkpoint_tensors, quantization_config, quantize

# projections that read the same input share the act-order permutation (a fused layer has one input order)
INPUT_OF = {"q_proj": "qkv", "k_proj": "qkv", "v_proj": "qkv", "gate_proj": "gate_up", "up_proj": "gate_up",
            "o_proj": "o", "down_proj": "down"}


def input_permutation(module: str, k: int) -> torch.Tensor:
    """The act-order of ``module``'s input: the same for projections of one input, random otherwise."""
    parent, _, proj = module.rpartition(".")
    seed = zlib.crc32(f"{parent.rpartition('.')[0]}.{INPUT_OF[proj]}".encode())
    return torch.randperm(k, generator=torch.Generator().manual_seed(seed))


def write_checkpoint(hf_model, folder: Path, layout: Layout, dense_folder: Path | None = None) -> None:
    """Save ``hf_model`` with every decoder linear layer in ``layout`` (the model then holds the
    dequantized weights, saved to ``dense_folder`` if given)."""
    def layer_tensors(module: str, weight: torch.Tensor):
        quant = quantize(weight, layout, input_permutation(module, weight.shape[1]))
        return checkpoint_tensors(quant, layout), quant.dequantized().t()

    write_quantized_checkpoint(hf_model, folder, layer_tensors, quantization_config(layout), dense_folder)


def write_tiny_llama(root: Path, layout: Layout):
    """tests/engine/tiny_models.py's Llama (word tokenizer) in ``layout`` at ``root/quant`` and with its
    dequantized weights at ``root/dense``; returns (quant, dense, the HF model with the dequantized weights)."""
    return write_tiny_pair(root / "quant", root / "dense",
                           lambda model, quant, dense: write_checkpoint(model, quant, layout, dense_folder=dense))
