"""The embedded default model (SmolLM2-135M-Instruct, a GGUF file) as an HF folder of float32 safetensors,
so every engine of the CPU comparison loads the same weights from the same files."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file


def build_model_folder(dest: Path) -> Path:
    """Write config, tokenizer and float32 weights of the default model into ``dest`` (kept if already there)."""
    if (dest / "model.safetensors").exists():
        return dest
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pagoda.loader import default_model_source

    source = default_model_source()
    tokenizer = AutoTokenizer.from_pretrained(str(source.path), gguf_file=source.gguf_file)
    model = AutoModelForCausalLM.from_pretrained(str(source.path), gguf_file=source.gguf_file, dtype=torch.float32)
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(dest)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # the GGUF's: the weights saved here are plain float32
    config.dtype = torch.float32
    config.save_pretrained(dest)
    weights = {name: t.contiguous() for name, t in model.state_dict().items()
               if not (config.tie_word_embeddings and name == "lm_head.weight")}  # tied: one copy
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest
