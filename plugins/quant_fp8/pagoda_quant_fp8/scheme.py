"""Which FP8 (or INT8) layout a checkpoint uses, read from config.json's ``quantization_config``.

Three sources are understood:

- none (a float checkpoint and ``--quantization fp8``): weights are quantized at load, one
  scale per output channel, activations per token at run time ("online").
- ``quant_method: "fp8"`` (transformers' FP8 configs, AutoFP8/llm-compressor exports):
  per-tensor ``weight_scale`` (+ ``input_scale`` when ``activation_scheme`` is ``static``), or
  block-wise ``weight_scale_inv`` when ``weight_block_size`` is given.
- ``quant_method: "compressed-tensors"`` with ``format: "float-quantized"``: one config group of
  8-bit float weights (strategy tensor, channel or block) and 8-bit float input activations
  (dynamic per token/tensor, or a static per-tensor ``input_scale``).

For the ``int8`` method (:func:`parse_int8_scheme`): a float checkpoint (quantized at load) or
``compressed-tensors`` with ``format: "int-quantized"``: symmetric 8-bit integer weights (strategy
tensor or channel) and activations (dynamic per token/tensor, or a static per-tensor ``input_scale``).
Both accept a ``kv_cache_scheme`` of static per-tensor FP8 scales (``k_scale``/``v_scale``, loaded by the
attention layers and used with ``--kv-cache-dtype fp8``).

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


def _unsupported(source: str, field: str, value: Any, supported: str, method: str = "fp8") -> ModelLoadError:
    return ModelLoadError(
        f"Unsupported {method.upper()} checkpoint ({source}): {field} = {value!r}; Pagoda's {method} method supports "
        f"{supported}."
    )


def _only_lm_head(source: str, field: str, names: Any, method: str = "fp8") -> None:
    """Every linear layer must be quantized: a list of unquantized modules may name only the LM head."""
    extra = [name for name in names or [] if "lm_head" not in name]
    if extra:
        raise _unsupported(source, field, extra,
                           f"leaving only lm_head unquantized (every linear layer in {method.upper()})", method)


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


# compressed-tensors' number type -> (its format, the method that reads it, what the type is called in errors)
CT_TYPES = {"float": ("float-quantized", "fp8", "8-bit float"), "int": ("int-quantized", "int8", "8-bit integer")}


def _compressed_tensors(cfg: dict[str, Any], num_type: str = "float") -> Fp8Scheme:
    src = "compressed-tensors"
    expected, method, words = CT_TYPES[num_type]
    fmt = cfg.get("format", expected)
    if fmt != expected:
        other = next((m for f, m, _ in CT_TYPES.values() if f == fmt), None)
        fix = f"; this one is read by --quantization {other}" if other else ""
        raise _unsupported(src, "format", fmt, f"'{expected}' ({words} weights and activations){fix}", method)
    _check_kv_cache_scheme(cfg.get("kv_cache_scheme"), method)
    _only_lm_head(src, "ignore", cfg.get("ignore"), method)
    sparsity = (cfg.get("sparsity_config") or {}).get("format", "dense")
    if sparsity != "dense":
        raise _unsupported(src, "sparsity_config.format", sparsity, "dense weights", method)
    groups = list((cfg.get("config_groups") or {}).values())
    schemes = {_ct_group(group, num_type) for group in groups}
    if len(schemes) != 1:
        raise _unsupported(src, "config_groups", cfg.get("config_groups"), "one scheme for all linear layers", method)
    return schemes.pop()


def _check_kv_cache_scheme(kv: dict[str, Any] | None, method: str) -> None:
    """Per-tensor static FP8 KV cache scales (``k_scale``/``v_scale``, used with --kv-cache-dtype fp8) or none."""
    if kv and not (kv.get("type") == "float" and int(kv.get("num_bits", 0)) == 8 and not kv.get("dynamic")
                   and kv.get("strategy", "tensor") == "tensor" and kv.get("symmetric", True)):
        raise _unsupported("compressed-tensors", "kv_cache_scheme", kv, "static per-tensor 8-bit float KV cache scales "
                           "(k_scale/v_scale, used with --kv-cache-dtype fp8) or none", method)


def _ct_group(group: dict[str, Any], num_type: str) -> Fp8Scheme:
    src, method = "compressed-tensors", CT_TYPES[num_type][1]
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    _check_type(weights, "weights", num_type)
    strategy = weights.get("strategy", "tensor")
    strategies = ("tensor", "channel", "block") if num_type == "float" else ("tensor", "channel")
    if strategy not in strategies or weights.get("dynamic") or weights.get("symmetric") is False:
        raise _unsupported(src, "weights", weights, f"symmetric static weights with strategy {', '.join(strategies)}",
                           method)
    if acts is None:
        raise _unsupported(src, "input_activations", None,
                           f"W8A8 ({CT_TYPES[num_type][2]} activations); weight-only {method.upper()} is not", method)
    _check_type(acts, "input_activations", num_type)
    if acts.get("symmetric") is False:
        raise _unsupported(src, "input_activations", acts, "symmetric activations (no zero points)", method)
    act_strategy, dynamic = acts.get("strategy", "tensor"), bool(acts.get("dynamic"))
    if strategy == "block":  # activations per group of columns: computed per token here (one scale per row)
        block = weights.get("block_structure")
        if not block or len(block) != 2 or not dynamic:
            raise _unsupported(src, "weights.block_structure", (block, acts), "[rows, cols] with dynamic activations")
        return Fp8Scheme(src, "block", "token", (int(block[0]), int(block[1])))
    if act_strategy not in ("tensor", "token") or (not dynamic and act_strategy != "tensor"):
        raise _unsupported(src, "input_activations", acts, "dynamic per-token/per-tensor or static per-tensor scales",
                           method)
    activation: ActivationScheme = act_strategy if dynamic else "static"
    return Fp8Scheme(src, strategy, activation)


def _check_type(args: dict[str, Any], field: str, num_type: str) -> None:
    if args.get("type") != num_type or int(args.get("num_bits", 0)) != 8:
        words = CT_TYPES[num_type][2]
        raise _unsupported("compressed-tensors", field, args, f"{words} (type '{num_type}', num_bits 8)",
                           CT_TYPES[num_type][1])


def parse_int8_scheme(quant_config: Any) -> Fp8Scheme:
    """The INT8 W8A8 scheme of ``quant_config``: compressed-tensors ``int-quantized`` (``None``: a float
    checkpoint, quantized at load per output channel with per-token activations)."""
    if not quant_config:
        return ONLINE
    cfg = quant_config if isinstance(quant_config, dict) else quant_config.to_dict()
    method = cfg.get("quant_method")
    if method == "compressed-tensors":
        return _compressed_tensors(cfg, "int")
    raise ModelLoadError(
        f"The checkpoint is quantized with quant_method '{method}', which the int8 method cannot read (it reads "
        f"'compressed-tensors' int-quantized W8A8 checkpoints, or quantizes float checkpoints at load). Pass "
        f"--quantization {method} if a plugin provides it, or use a float or INT8 W8A8 checkpoint."
    )
