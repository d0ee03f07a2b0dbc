"""Built-in capabilities, registered through the same hooks as any installed plugin."""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_platforms(register: Register) -> None:
    from pagoda.platforms.cpu import CpuPlatform

    register("cpu", CpuPlatform)


@hookimpl
def register_attention_backends(register: Register) -> None:
    from pagoda.attention.torch_ref import TorchAttentionBackend

    register("torch", TorchAttentionBackend)


@hookimpl
def register_quantization_methods(register: Register) -> None:
    from pagoda.quantization.unquantized import UnquantizedMethod

    register("none", UnquantizedMethod)


@hookimpl
def register_models(register: Register) -> None:
    from pagoda.models import MODEL_CLASSES, model_class

    for architecture in MODEL_CLASSES:  # SmolLM2 is a LlamaForCausalLM
        register(architecture, model_class(architecture))


@hookimpl
def register_schedulers(register: Register) -> None:
    from pagoda.scheduler import FcfsScheduler, PriorityScheduler

    register("fcfs", FcfsScheduler)
    register("priority", PriorityScheduler)


@hookimpl
def register_proposers(register: Register) -> None:
    from pagoda.spec_decode.draft import DraftProposer
    from pagoda.spec_decode.eagle import EagleProposer
    from pagoda.spec_decode.ngram import NgramProposer

    register("ngram", NgramProposer)
    register("draft", DraftProposer)
    register("eagle", EagleProposer)


@hookimpl
def register_guided_decoding_backends(register: Register) -> None:
    from pagoda.guided.xgrammar_backend import XgrammarBackend

    register("xgrammar", XgrammarBackend)


@hookimpl
def register_tool_parsers(register: Register) -> None:
    from pagoda.tools.hermes import HermesToolParser
    from pagoda.tools.llama3_json import Llama3JsonToolParser
    from pagoda.tools.mistral import MistralToolParser

    register("hermes", HermesToolParser)
    register("llama3_json", Llama3JsonToolParser)
    register("mistral", MistralToolParser)


@hookimpl
def register_reasoning_parsers(register: Register) -> None:
    from pagoda.reasoning.think import DeepSeekR1ReasoningParser, Qwen3ReasoningParser

    register("deepseek_r1", DeepSeekR1ReasoningParser)
    register("qwen3", Qwen3ReasoningParser)


@hookimpl
def register_kv_connectors(register: Register) -> None:
    from pagoda.kv_connectors.offload import OffloadConnector
    from pagoda.kv_connectors.shared_storage import SharedStorageConnector
    from pagoda.kv_connectors.zmq_link import ZmqConnector

    register("offload", OffloadConnector)
    register("shared_storage", SharedStorageConnector)
    register("zmq", ZmqConnector)
