"""The AWQ checkpoint settings Pagoda reads: ``quantization_config`` of config.json, validated.

AutoAWQ's GEMM format: ``{"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": true,
"version": "gemm"}``. Anything else this plugin cannot compute raises :class:`ModelLoadError`
naming the setting and what to use instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagoda.errors import ModelLoadError

GROUP_SIZES = (32, 64, 128)
VERSIONS = ("gemm",)
# Modules kept dense by the quantizer that Pagoda keeps dense anyway (the LM head, embeddings).
DENSE_ANYWAY = ("lm_head", "embed_tokens")


@dataclass(frozen=True)
class AwqConfig:
    """4-bit weights with one fp16 scale and one 4-bit zero point per ``group_size`` inputs."""

    group_size: int = 128
    bits: int = 4
    zero_point: bool = True

    @property
    def pack_factor(self) -> int:
        """Values per int32 (8 for 4 bits)."""
        return 32 // self.bits

    @classmethod
    def from_dict(cls, qc: dict[str, Any] | None) -> "AwqConfig":
        """Validate config.json's ``quantization_config`` (AWQ never quantizes dense weights itself)."""
        if not qc:
            raise ModelLoadError(
                "--quantization awq needs an AWQ checkpoint, but config.json has no quantization_config (AWQ does "
                "not quantize dense weights at load). For random weights (--load-format dummy) use a config that "
                "has one, e.g. benchmarks/configs/llama-3.1-8b-awq."
            )
        _check(str(qc.get("quant_method", "awq")).lower() == "awq",
               f"quant_method '{qc.get('quant_method')}' is not 'awq'; pass --quantization {qc.get('quant_method')}")
        bits = int(qc.get("bits", qc.get("w_bit", 4)))
        _check(bits == 4, f"bits={bits}: only 4-bit AWQ weights are supported; quantize with bits=4")
        group = int(qc.get("group_size", qc.get("q_group_size", 128)))
        _check(group in GROUP_SIZES, f"group_size={group}: supported group sizes are {', '.join(map(str, GROUP_SIZES))}")
        zero_point = bool(qc.get("zero_point", True))
        _check(zero_point, "zero_point=false (symmetric AWQ) is not supported; quantize with zero_point=true")
        _check(not qc.get("desc_act", False), "desc_act=true (act-order) is not an AWQ GEMM setting and is not "
               "supported; use a checkpoint quantized without act-order")
        version = str(qc.get("version", "gemm")).lower()
        _check(version in VERSIONS, f"version '{version}': only AutoAWQ's GEMM layout is supported; "
               "export the model with version='gemm'")
        kept = [m for m in qc.get("modules_to_not_convert") or [] if m not in DENSE_ANYWAY]
        _check(not kept, f"modules_to_not_convert={kept}: Pagoda quantizes every linear layer of the model alike; "
               "use a checkpoint that quantizes all of them")
        return cls(group_size=group, bits=bits, zero_point=zero_point)


def _check(ok: bool, problem: str) -> None:
    if not ok:
        raise ModelLoadError(f"Unsupported AWQ checkpoint (config.json quantization_config): {problem}.")
