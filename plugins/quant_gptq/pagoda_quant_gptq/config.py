"""The checkpoint settings this plugin reads, validated: GPTQ's ``quantization_config`` and
compressed-tensors' ``pack-quantized`` weight-only scheme. Both describe the same thing, integer
weights with one scale (and zero point) per group of inputs of each output, so both become one
:class:`GroupedIntConfig`. Anything this plugin cannot compute raises :class:`ModelLoadError` naming
the setting and what to use instead.

GPTQ: ``{"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": true, "desc_act": false,
"checkpoint_format": "gptq"}`` (``gptq``: AutoGPTQ's v1 zero points, stored minus one;
``gptq_v2``: stored as they are). compressed-tensors: ``{"quant_method": "compressed-tensors",
"format": "pack-quantized", "config_groups": {"group_0": {"weights": {"type": "int", "num_bits": 4,
"strategy": "group", "group_size": 128, "symmetric": true, "actorder": null}}}}``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagoda.errors import ModelLoadError

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)  # and -1 (GPTQ) / strategy "channel" (compressed-tensors): one group of all inputs
PER_CHANNEL = -1
GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 0}  # checkpoint_format -> what is added to the stored zero points
DUMMY_HINT = "For random weights (--load-format dummy) use a config that has one, e.g. benchmarks/configs/llama-3.1-8b-gptq."


@dataclass(frozen=True)
class GroupedIntConfig:
    """``W[k, n] = (q[k, n] - z[g(k), n]) * s[g(k), n]`` with ``bits``-bit unsigned ``q``: ``g(k)`` is
    ``k // group_size`` (one group of all inputs for :data:`PER_CHANNEL`), or the checkpoint's
    ``g_idx[k]`` with ``act_order``; ``z`` is ``2 ** (bits - 1)`` when ``sym``, else the stored zero
    point plus ``zero_offset``."""

    source: str  # "GPTQ" or "compressed-tensors", for messages
    bits: int
    group_size: int
    sym: bool
    act_order: bool
    zero_offset: int = 0

    @property
    def pack_factor(self) -> int:
        """Values per int32: 8 for 4 bits, 4 for 8 bits."""
        return 32 // self.bits

    @property
    def sym_zero(self) -> int:
        return 1 << (self.bits - 1)

    def groups(self, in_features: int) -> int:
        """Groups of a layer with ``in_features`` (all ranks') inputs."""
        return 1 if self.group_size == PER_CHANNEL else -(-in_features // self.group_size)


def gptq_config(qc: dict[str, Any] | None) -> GroupedIntConfig:
    """Validate a GPTQ ``quantization_config``."""
    def check(ok: bool, problem: str) -> None:
        if not ok:
            raise ModelLoadError(f"Unsupported GPTQ checkpoint (config.json quantization_config): {problem}.")

    if not qc:
        raise ModelLoadError("--quantization gptq needs a GPTQ checkpoint, but config.json has no quantization_config "
                             f"(GPTQ does not quantize dense weights at load). {DUMMY_HINT}")
    method = str(qc.get("quant_method", "gptq")).lower()
    check(method == "gptq", f"quant_method '{method}' is not 'gptq'; leave --quantization unset (auto) to read it")
    bits = int(qc.get("bits", 4))
    check(bits in BITS, f"bits={bits}: supported are 4 and 8; quantize with bits=4 or bits=8")
    group = int(qc.get("group_size", 128))
    check(group in GROUP_SIZES + (PER_CHANNEL,), f"group_size={group}: supported group sizes are 32, 64, 128 and -1")
    fmt = str(qc.get("checkpoint_format") or qc.get("format") or "gptq").lower()
    check(fmt in GPTQ_FORMATS, f"checkpoint_format '{fmt}': supported are 'gptq' (v1) and 'gptq_v2'; "
          "export the model in the gptq format")
    check(not qc.get("lm_head"), "lm_head=true (a quantized LM head): Pagoda keeps the LM head dense; "
          "quantize with lm_head=false")
    check(not qc.get("dynamic"), f"dynamic={qc.get('dynamic')!r} (per-module settings): Pagoda quantizes every "
          "linear layer alike; quantize without dynamic overrides")
    return GroupedIntConfig("GPTQ", bits, group, bool(qc.get("sym", True)), bool(qc.get("desc_act", False)),
                            GPTQ_FORMATS[fmt])


def wna16_config(qc: dict[str, Any] | None) -> GroupedIntConfig:
    """Validate a compressed-tensors ``pack-quantized`` weight-only ``quantization_config``."""
    if not qc:
        raise ModelLoadError("--quantization wna16 needs a compressed-tensors pack-quantized checkpoint, but "
                             "config.json has no quantization_config (for random weights, --load-format dummy, "
                             "give the config one).")
    method = str(qc.get("quant_method", "")).lower()
    _ct_check(method == "compressed-tensors", "quant_method", method, "'compressed-tensors' (a GPTQ checkpoint "
              "is read by --quantization gptq, or leave the flag unset)")
    groups = list((qc.get("config_groups") or {}).values())
    _ct_check(len({repr(sorted((g.get("weights") or {}).items())) for g in groups}) == 1, "config_groups",
              qc.get("config_groups"), "one weight scheme for every linear layer")
    group = groups[0]
    fmt = group.get("format") or qc.get("format") or "pack-quantized"
    _ct_check(fmt == "pack-quantized", "format", fmt, "'pack-quantized'")
    _ct_check(not group.get("input_activations"), "input_activations", group.get("input_activations"),
              "none (weight-only; W8A8-INT8 checkpoints are read by --quantization int8 of pagoda-quant-fp8)")
    ignored = [name for name in qc.get("ignore") or [] if "lm_head" not in name]
    _ct_check(not ignored, "ignore", ignored, "leaving only lm_head unquantized")
    sparsity = (qc.get("sparsity_config") or {}).get("format", "dense")
    _ct_check(sparsity == "dense", "sparsity_config.format", sparsity, "dense weights")
    return _ct_weights(group.get("weights") or {})


def _ct_weights(weights: dict[str, Any]) -> GroupedIntConfig:
    bits = int(weights.get("num_bits") or 0)
    _ct_check(weights.get("type") == "int" and bits in BITS, "weights", weights, "int weights of 4 or 8 bits")
    _ct_check(not weights.get("dynamic"), "weights.dynamic", weights.get("dynamic"), "static weight scales")
    strategy = weights.get("strategy")
    _ct_check(strategy in ("group", "channel"), "weights.strategy", strategy, "'group' or 'channel'")
    group = PER_CHANNEL if strategy == "channel" else int(weights.get("group_size") or 0)
    _ct_check(group in GROUP_SIZES + (PER_CHANNEL,), "weights.group_size", group, "32, 64 or 128")
    actorder = weights.get("actorder")
    _ct_check(actorder in (None, "weight", "static", "group", "dynamic"), "weights.actorder", actorder,
              "none, 'weight' or 'group'")
    # 'group' (alias 'dynamic') stores a weight_g_idx; 'weight' ('static') only reordered the quantization
    act_order = actorder in ("group", "dynamic") and group != PER_CHANNEL
    return GroupedIntConfig("compressed-tensors", bits, group, bool(weights.get("symmetric", True)), act_order)


def _ct_check(ok: bool, field: str, value: Any, supported: str) -> None:
    if not ok:
        raise ModelLoadError(
            f"Unsupported compressed-tensors checkpoint (config.json quantization_config): {field} = {value!r}; "
            f"the wna16 method supports {supported}."
        )
