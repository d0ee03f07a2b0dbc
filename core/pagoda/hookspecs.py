"""The whole plugin contract: the hooks a Pagoda plugin may implement.

A plugin is a module (found through the ``pagoda.plugins`` entry-point group) with functions
decorated by :data:`hookimpl`. Registration hooks receive a ``register`` callback:
``register(name, obj)``. The objects implement the interfaces in :mod:`pagoda.interfaces`.
"""

from __future__ import annotations

from typing import Any, Callable

import pluggy

PROJECT = "pagoda"
ENTRY_POINT_GROUP = "pagoda.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

Register = Callable[[str, Any], None]


@hookspec
def register_platforms(register: Register) -> None:
    """Register Platform subclasses: ``register("cuda", CudaPlatform)``."""


@hookspec
def register_attention_backends(register: Register) -> None:
    """Register AttentionBackend subclasses: ``register("triton", TritonBackend)``."""


@hookspec
def register_quantization_methods(register: Register) -> None:
    """Register QuantizationMethod subclasses: ``register("fp8", Fp8Method)``."""


@hookspec
def register_models(register: Register) -> None:
    """Register model classes by HF architecture: ``register("LlamaForCausalLM", LlamaForCausalLM)``."""


@hookspec
def register_schedulers(register: Register) -> None:
    """Register Scheduler subclasses: ``register("fcfs", FcfsScheduler)``."""


@hookspec
def register_proposers(register: Register) -> None:
    """Register speculative-decoding Proposer subclasses: ``register("ngram", NgramProposer)``."""


@hookspec
def register_guided_decoding_backends(register: Register) -> None:
    """Register GuidedDecodingBackend subclasses (grammar engines): ``register("xgrammar", XgrammarBackend)``."""


@hookspec
def register_tool_parsers(register: Register) -> None:
    """Register ToolParser subclasses (tool-call formats): ``register("hermes", HermesToolParser)``."""


@hookspec
def register_reasoning_parsers(register: Register) -> None:
    """Register ReasoningParser subclasses (reasoning blocks): ``register("deepseek_r1", DeepSeekR1ReasoningParser)``."""


@hookspec
def register_kv_connectors(register: Register) -> None:
    """Register KVConnector subclasses (KV blocks beyond the device cache): ``register("offload", OffloadConnector)``."""


@hookspec
def register_commands(subparsers: Any) -> None:
    """Add CLI subcommands: ``subparsers.add_parser(...)``; set ``func=`` on the parser's defaults."""
