"""The embedded default model (SmolLM2-135M-Instruct, Q4_1 GGUF) as transformers loads it.

Cached once per process, so every test (and the end-to-end chat parity test) shares one
float32 HF model and tokenizer. transformers' ``from_pretrained(gguf_file=...)`` needs
``accelerate``; without it the same conversion runs through transformers' own
``load_gguf_checkpoint`` (its dequantization, renaming and q/k un-permutation).
"""

from __future__ import annotations

import functools
import os

import torch

from pagoda.loader import default_model_source


@functools.lru_cache(maxsize=1)
def hf_tokenizer():
    """The GGUF's tokenizer; or, where the 94 MB checkpoint cannot travel (the GPU machine), the same
    tokenizer saved to the folder ``PAGODA_SMOLLM_TOKENIZER`` names (scripts/device/prepare.sh smollm-tokenizer)."""
    from transformers import AutoTokenizer

    folder = os.environ.get("PAGODA_SMOLLM_TOKENIZER")
    if folder:
        return AutoTokenizer.from_pretrained(folder)
    source = default_model_source()
    return AutoTokenizer.from_pretrained(str(source.path), gguf_file=source.gguf_file)


@functools.lru_cache(maxsize=1)
def hf_model():
    """transformers' float32 model of the GGUF file (eval mode)."""
    from transformers import AutoModelForCausalLM

    source = default_model_source()
    try:
        model = AutoModelForCausalLM.from_pretrained(str(source.path), gguf_file=source.gguf_file, dtype=torch.float32)
    except (ImportError, ValueError) as exc:
        if "accelerate" not in str(exc):
            raise
        model = _convert_without_accelerate(source)
    return model.eval()


def _convert_without_accelerate(source):
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    config = AutoConfig.from_pretrained(str(source.path), gguf_file=source.gguf_file)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    tensors = load_gguf_checkpoint(str(source.gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model


def hf_model_and_tokenizer():
    return hf_model(), hf_tokenizer()
