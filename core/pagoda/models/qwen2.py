"""Qwen2: the Llama decoder with biases on q/k/v (not on o_proj)."""

from __future__ import annotations

from typing import Any

from pagoda.models.llama import DecoderOptions, LlamaForCausalLM


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Qwen2 / Qwen2.5 (sliding window, when enabled, is carried by the AttentionSpec)."""

    @classmethod
    def decoder_options(cls, hf_config: Any) -> DecoderOptions:
        return DecoderOptions(qkv_bias=True, o_bias=False, mlp_bias=False)
