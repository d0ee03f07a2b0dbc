"""The kinds of registrable capability, and which first-party plugin provides which name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Kind:
    key: str  # registry key
    hook: str  # hookspec that fills it
    label: str  # for messages: "attention backend"
    flag: str | None  # CLI flag that selects it, if any
    check_args: tuple[str, ...]  # keyword arguments passed to obj.check(...)
    # what the kind's contract requires of every entry, checked before obj.check: (obj, **check_args) -> reason
    requirement: Callable[..., str | None] | None = None
    auto: bool = True  # whether 'auto' may pick an entry (False: a name must be given, e.g. a tool-call parser)
    # what 'auto' selects when it is not 'the usable entry of highest priority' (quantization: 'none';
    # the checkpoint's own method is resolved before the registry is asked)
    auto_name: str | None = None


def _attention_contract(backend_cls: Any, platform: Any = None, spec: Any = None) -> str | None:
    from pagoda.interfaces.attention import contract_reason

    return contract_reason(backend_cls, spec)


KINDS: dict[str, Kind] = {
    k.key: k
    for k in (
        Kind("platform", "register_platforms", "platform", "--platform", ()),
        Kind("attention", "register_attention_backends", "attention backend", "--attention-backend", ("platform", "spec"),
             _attention_contract),
        Kind("quantization", "register_quantization_methods", "quantization method", "--quantization", ("platform",),
             auto_name="none"),
        Kind("model", "register_models", "model architecture", None, ()),
        Kind("scheduler", "register_schedulers", "scheduler", "--scheduler", ()),
        Kind("proposer", "register_proposers", "speculative proposer", "--speculative-config", (), auto=False),
        Kind("guided_decoding", "register_guided_decoding_backends", "guided decoding backend",
             "--guided-decoding-backend", ()),
        Kind("tool_parser", "register_tool_parsers", "tool-call parser", "--tool-call-parser", (), auto=False),
        Kind("reasoning_parser", "register_reasoning_parsers", "reasoning parser", "--reasoning-parser", (),
             auto=False),
        Kind("kv_connector", "register_kv_connectors", "KV connector", "--kv-transfer-config", (), auto=False),
    )
}

# (kind, name) -> folder under plugins/ of the first-party distribution that provides it.
FIRST_PARTY: dict[tuple[str, str], str] = {
    ("platform", "cpu-native"): "platform_cpu",
    ("platform", "cuda"): "platform_cuda",
    ("platform", "rocm"): "platform_rocm",
    ("attention", "triton"): "attention_triton",
    ("attention", "flash"): "attention_flash",
    ("attention", "cpu"): "attention_cpu",
    ("quantization", "fp8"): "quant_fp8",
    ("quantization", "int8"): "quant_fp8",
    ("quantization", "awq"): "quant_awq",
    ("quantization", "gptq"): "quant_gptq",
    ("quantization", "wna16"): "quant_gptq",
}


def distribution_of(folder: str) -> str:
    """``attention_triton`` -> ``pagoda-attention-triton``."""
    return "pagoda-" + folder.replace("_", "-")


def plugin_name_of(distribution: str) -> str:
    """The entry-point name first-party plugins use: ``pagoda-attention-triton`` -> ``attention-triton``."""
    return distribution.removeprefix("pagoda-")
