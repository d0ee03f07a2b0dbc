"""Which FP8 layout a checkpoint uses, read from config.json's ``quantization_config``.

Three sources are understood:

- none (a float checkpoint and ``--quantization fp8``): weights are quantized at load, one
  scale per output channel, activations per token at run time ("online").
- ``quant_method: "fp8"`` (transformers' FP8 configs, AutoFP8/llm-compressor exports):
  per-tensor ``weight_scale`` (+ ``input_scale`` when ``activation_scheme`` is ``static``), or
  block-wise ``weight_scale_inv`` when ``weight_block_size`` is given.
- ``quant_method: "compressed-tensors"`` with ``format: "float-quantized"``: one config group of
  8-bit float weights (strategy tensor, channel or block) and 8-bit float input activations
  (dynamic per token/tensor, or a static per-tensor ``input_scale``).

Anything else raises a ModelLoadError naming the field, its value and what is supported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pagoda.errors import ModelLoadError

WeightScheme = Literal["online", "tensor", "channel", "block"]
ActivationScheme = Literal["token", "tensor", "static"]  # dynamic per token, dynamic per tensor, static per tensor


@dataclass(frozen=True)
class Fp8Scheme:
    """How a checkpoint stores FP8 linear layers and how activations are quantized."""

    source: str  # "online", "fp8" or "compressed-tensors" (named in errors and logs)
    weight: WeightScheme
    activation: ActivationScheme
    block: tuple[int, int] | None = None  # (rows, cols) of a weight-scale block, for weight == "block"
    scale_name: str = "weight_scale"  # the checkpoint's name of the weight scale tensor

    @property
    def checkpoint_is_fp8(self) -> bool:
        return self.weight != "online"


ONLINE = Fp8Scheme("online", "online", "token")


def parse_scheme(quant_config: Any) -> Fp8Scheme:
    """The scheme of ``quant_config`` (``None`` for a float checkpoint: online quantization)."""
    if not quant_config:
        return ONLINE
    cfg = quant_config if isinstance(quant_config, dict) else quant_config.to_dict()
    method = cfg.get("quant_method")
    if method == "fp8":
        return _hf_fp8(cfg)
    if method == "compressed-tensors":
        return _compressed_tensors(cfg)
    raise ModelLoadError(
        f"The checkpoint is quantized with quant_method '{method}', which the fp8 method cannot read "
        f"(it reads 'fp8' and float 8-bit 'compressed-tensors' checkpoints, or quantizes float checkpoints "
        f"at load). Pass --quantization {method} if a plugin provides it, or use a float or FP8 checkpoint."
    )


def _unsupported(source: str, field: str, value: Any, supported: str) -> ModelLoadError:
    return ModelLoadError(
        f"Unsupported FP8 checkpoint ({source}): {field} = {value!r}; Pagoda's fp8 method supports {supported}."
    )


def _only_lm_head(source: str, field: str, names: Any) -> None:
    """Every linear layer must be FP8: a list of unquantized modules may name only the LM head."""
    extra = [name for name in names or [] if "lm_head" not in name]
    if extra:
        raise _unsupported(source, field, extra, "leaving only lm_head unquantized (every linear layer in FP8)")


def _hf_fp8(cfg: dict[str, Any]) -> Fp8Scheme:
    for field in ("ignored_layers", "modules_to_not_convert"):
        _only_lm_head("fp8", field, cfg.get(field))
    fmt = cfg.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise _unsupported("fp8", "fmt", fmt, "'e4m3' weights")
    activation = cfg.get("activation_scheme", "dynamic")
    if activation not in ("dynamic", "static"):
        raise _unsupported("fp8", "activation_scheme", activation, "'dynamic' or 'static'")
    block = cfg.get("weight_block_size")
    if block:
        if activation != "dynamic" or len(block) != 2:
            raise _unsupported("fp8", "weight_block_size/activation_scheme", (block, activation),
                               "[rows, cols] blocks with dynamic activations")
        return Fp8Scheme("fp8", "block", "token", (int(block[0]), int(block[1])), "weight_scale_inv")
    return Fp8Scheme("fp8", "tensor", "static" if activation == "static" else "tensor")


def _compressed_tensors(cfg: dict[str, Any]) -> Fp8Scheme:
    src = "compressed-tensors"
    fmt = cfg.get("format", "float-quantized")
    if fmt != "float-quantized":
        raise _unsupported(src, "format", fmt, "'float-quantized' (8-bit float weights and activations)")
    if cfg.get("kv_cache_scheme"):
        raise _unsupported(src, "kv_cache_scheme", cfg["kv_cache_scheme"], "none (no FP8 KV cache scales)")
    _only_lm_head(src, "ignore", cfg.get("ignore"))
    sparsity = (cfg.get("sparsity_config") or {}).get("format", "dense")
    if sparsity != "dense":
        raise _unsupported(src, "sparsity_config.format", sparsity, "dense weights")
    groups = list((cfg.get("config_groups") or {}).values())
    schemes = {_ct_group(group) for group in groups}
    if len(schemes) != 1:
        raise _unsupported(src, "config_groups", cfg.get("config_groups"), "one scheme for all linear layers")
    return schemes.pop()


def _ct_group(group: dict[str, Any]) -> Fp8Scheme:
    src = "compressed-tensors"
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    _check_float8(weights, "weights")
    strategy = weights.get("strategy", "tensor")
    if strategy not in ("tensor", "channel", "block") or weights.get("dynamic") or weights.get("symmetric") is False:
        raise _unsupported(src, "weights", weights, "symmetric static weights with strategy tensor, channel or block")
    if acts is None:
        raise _unsupported(src, "input_activations", None, "W8A8 (8-bit float activations); weight-only FP8 is not")
    _check_float8(acts, "input_activations")
    act_strategy, dynamic = acts.get("strategy", "tensor"), bool(acts.get("dynamic"))
    if strategy == "block":  # activations per group of columns: computed per token here (one scale per row)
        block = weights.get("block_structure")
        if not block or len(block) != 2 or not dynamic:
            raise _unsupported(src, "weights.block_structure", (block, acts), "[rows, cols] with dynamic activations")
        return Fp8Scheme(src, "block", "token", (int(block[0]), int(block[1])))
    if act_strategy not in ("tensor", "token") or (not dynamic and act_strategy != "tensor"):
        raise _unsupported(src, "input_activations", acts, "dynamic per-token/per-tensor or static per-tensor scales")
    activation: ActivationScheme = act_strategy if dynamic else "static"
    return Fp8Scheme(src, strategy, activation)


def _check_float8(args: dict[str, Any], field: str) -> None:
    if args.get("type") != "float" or int(args.get("num_bits", 0)) != 8:
        raise _unsupported("compressed-tensors", field, args, "8-bit float (type 'float', num_bits 8)")
