"""Which quantization method a model uses: ``--quantization``, else the checkpoint's own.

A quantized HF checkpoint names its method in config.json (``quantization_config.quant_method``,
e.g. ``"awq"``). Without ``--quantization`` (or with ``auto``) that method is used (renamed through
``METHOD_OF_QUANT_METHOD`` where a Pagoda method reads another format's name), else ``none``.
``compressed-tensors`` names a container, not a scheme: its ``config_groups`` decide
(:func:`compressed_tensors_method`), the same for ``--quantization compressed-tensors``. An explicit
method may differ from the checkpoint's (online quantization, dummy weights); each method checks the
``quantization_config`` it is given. Only ``none`` on a quantized checkpoint is refused here: dense
layers cannot hold quantized tensors. No installed method is ever chosen for a checkpoint that
declares none: ``auto`` never quantizes a model nobody asked to quantize.
"""

from __future__ import annotations

from typing import Any

from pagoda.errors import IncompatibleChoiceError, ModelLoadError

UNQUANTIZED = "none"
AUTO = "auto"
COMPRESSED_TENSORS = "compressed-tensors"

# quant_method in config.json -> the registered method that reads it (others keep their name)
METHOD_OF_QUANT_METHOD: dict[str, str] = {}

# compressed-tensors schemes Pagoda reads: (weights, input activations) -> method, and what users read
SUPPORTED_COMPRESSED_TENSORS = (
    "8-bit float weights (with 8-bit float or no input activations) -> fp8 (pagoda-quant-fp8)",
    "8-bit int weights with 8-bit int input activations (W8A8-INT8) -> int8 (pagoda-quant-fp8)",
    "4- or 8-bit int weights without input activations, format pack-quantized (W4A16, W8A16) "
    "-> wna16 (pagoda-quant-gptq)",
)
# a format named without config_groups, read alone
METHOD_OF_FORMAT = {"float-quantized": "fp8", "int-quantized": "int8", "pack-quantized": "wna16"}


def quantization_config(hf_config: Any) -> dict[str, Any] | None:
    """config.json's ``quantization_config`` as a dict, or ``None``."""
    qc = getattr(hf_config, "quantization_config", None)
    if qc is None or isinstance(qc, dict):
        return qc
    return qc.to_dict() if hasattr(qc, "to_dict") else dict(vars(qc))


def checkpoint_quant_method(hf_config: Any) -> str | None:
    """``quantization_config.quant_method`` of the model config (lower case), or ``None``."""
    qc = getattr(hf_config, "quantization_config", None)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    method = getattr(method, "value", method)  # transformers may hold an enum
    return str(method).lower() if method else None


def resolve_quantization(requested: str | None, hf_config: Any) -> str:
    """The method name to select: ``requested`` if given (not ``auto``), else the checkpoint's, else ``none``."""
    found = checkpoint_quant_method(hf_config)
    if requested in (None, AUTO):
        return checkpoint_method(found, hf_config) if found else UNQUANTIZED
    if requested == UNQUANTIZED and found is not None:
        raise IncompatibleChoiceError(
            f"--quantization none cannot load this checkpoint: it is quantized with '{found}' (config.json "
            f"quantization_config.quant_method); drop the flag or pass --quantization {found}."
        )
    if requested == COMPRESSED_TENSORS and found == COMPRESSED_TENSORS:
        return checkpoint_method(found, hf_config)
    return requested


def checkpoint_method(found: str, hf_config: Any) -> str:
    """The registered method that reads a checkpoint whose ``quant_method`` is ``found``."""
    if found == COMPRESSED_TENSORS:
        return compressed_tensors_method(quantization_config(hf_config) or {})
    return METHOD_OF_QUANT_METHOD.get(found, found)


def compressed_tensors_method(qc: dict[str, Any]) -> str:
    """``fp8``, ``int8`` or ``wna16``, by the scheme of every config group (one for all layers);
    a checkpoint without ``config_groups`` by its ``format``. Anything else is refused naming what the
    checkpoint declares and what is supported."""
    groups = list((qc.get("config_groups") or {}).values())
    if not groups:
        fmt = str(qc.get("format", "float-quantized"))
        if fmt in METHOD_OF_FORMAT:
            return METHOD_OF_FORMAT[fmt]
        raise _unsupported(f"format '{fmt}' and no config_groups")
    methods = {_group_method(group, str(group.get("format") or qc.get("format") or "")) for group in groups}
    if len(methods) > 1:
        declared = "; ".join(_describe(group) for group in groups)
        raise _unsupported(f"different schemes per config group ({declared}); Pagoda reads one scheme for every "
                           "linear layer")
    return methods.pop()


def _group_method(group: dict[str, Any], fmt: str) -> str:
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    w_type, w_bits = weights.get("type"), int(weights.get("num_bits") or 0)
    if w_type == "float" and w_bits == 8:
        return "fp8"  # pagoda-quant-fp8 names the float schemes it refuses
    if w_type == "int" and acts:
        if w_bits == 8 and acts.get("type") == "int" and int(acts.get("num_bits") or 0) == 8:
            return "int8"
    elif w_type == "int" and w_bits in (4, 8) and fmt in ("pack-quantized", ""):
        return "wna16"
    raise _unsupported(_describe(group) + (f", format {fmt}" if fmt else ""))


def _describe(group: dict[str, Any]) -> str:
    weights, acts = group.get("weights") or {}, group.get("input_activations")
    text = f"weights {weights.get('type')} {weights.get('num_bits')}-bit"
    if not acts:
        return text + ", no input activations"
    return text + f", input activations {acts.get('type')} {acts.get('num_bits')}-bit"


def _unsupported(declared: str) -> ModelLoadError:
    return ModelLoadError(
        f"Unsupported compressed-tensors checkpoint: it declares {declared} (config.json quantization_config). "
        f"Pagoda reads: {'; '.join(SUPPORTED_COMPRESSED_TENSORS)}."
    )
