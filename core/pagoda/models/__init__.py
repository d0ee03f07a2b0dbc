"""Pagoda's own model implementations, registered by HF architecture name (see plugins.builtin).

``MODEL_CLASSES`` maps architecture -> ``"module:Class"`` so registering imports nothing heavy.
"""

from __future__ import annotations

import importlib

MODEL_CLASSES: dict[str, str] = {
    "LlamaForCausalLM": "pagoda.models.llama:LlamaForCausalLM",
    "MistralForCausalLM": "pagoda.models.llama:MistralForCausalLM",
    "Qwen2ForCausalLM": "pagoda.models.qwen2:Qwen2ForCausalLM",
    "Qwen3ForCausalLM": "pagoda.models.qwen3:Qwen3ForCausalLM",
    "MixtralForCausalLM": "pagoda.models.mixtral:MixtralForCausalLM",
    "Qwen3MoeForCausalLM": "pagoda.models.qwen3_moe:Qwen3MoeForCausalLM",
    "Gemma3ForCausalLM": "pagoda.models.gemma3:Gemma3ForCausalLM",
    "Phi3ForCausalLM": "pagoda.models.phi3:Phi3ForCausalLM",
    "DeepseekV2ForCausalLM": "pagoda.models.deepseek:DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM": "pagoda.models.deepseek:DeepseekV3ForCausalLM",
    # vision-language models (docs/multimodal.md)
    "LlavaForConditionalGeneration": "pagoda.models.llava:LlavaForConditionalGeneration",
    "LlavaNextForConditionalGeneration": "pagoda.models.llava_next:LlavaNextForConditionalGeneration",
    "Qwen2_5_VLForConditionalGeneration": "pagoda.models.qwen2_5_vl:Qwen2_5_VLForConditionalGeneration",
    "Gemma3ForConditionalGeneration": "pagoda.models.gemma3_vl:Gemma3ForConditionalGeneration",
    "BertModel": "pagoda.models.bert:BertModel",  # pooling models (runner="pooling", docs/pooling.md)
    "BertForSequenceClassification": "pagoda.models.bert:BertForSequenceClassification",
}


def model_class(architecture: str) -> type:
    """Import and return the class registered for ``architecture`` (KeyError if none)."""
    module, _, name = MODEL_CLASSES[architecture].partition(":")
    return getattr(importlib.import_module(module), name)
