"""The built-in plugin registers Pagoda's model classes by HF architecture name."""

from __future__ import annotations

from pagoda.models.llama import LlamaForCausalLM, MistralForCausalLM
from pagoda.models.qwen2 import Qwen2ForCausalLM
from pagoda.models.mixtral import MixtralForCausalLM
from pagoda.models.qwen3 import Qwen3ForCausalLM
from pagoda.models.qwen3_moe import Qwen3MoeForCausalLM
from pagoda.plugins.manager import PluginManager


def test_builtin_registers_the_llama_and_moe_families():
    registry = PluginManager(allow=["builtin"]).registry("model")
    expected = {"LlamaForCausalLM": LlamaForCausalLM, "MistralForCausalLM": MistralForCausalLM,
                "Qwen2ForCausalLM": Qwen2ForCausalLM, "Qwen3ForCausalLM": Qwen3ForCausalLM,
                "MixtralForCausalLM": MixtralForCausalLM, "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM}
    for arch, cls in expected.items():
        assert registry.get(arch) is cls
