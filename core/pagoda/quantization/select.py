"""Which quantization method a model uses: ``--quantization``, else the checkpoint's own.

A quantized HF checkpoint names its method in config.json (``quantization_config.quant_method``,
e.g. ``"awq"``, ``"fp8"``). Without ``--quantization`` that method is used; with it, the two must
agree (``none`` cannot read quantized tensors, and ``awq`` cannot read a dense checkpoint).
"""

from __future__ import annotations

from typing import Any

from pagoda.errors import IncompatibleChoiceError

UNQUANTIZED = "none"


def checkpoint_quant_method(hf_config: Any) -> str | None:
    """``quantization_config.quant_method`` of the model config (lower case), or ``None``."""
    qc = getattr(hf_config, "quantization_config", None)
    if qc is None:
        return None
    method = qc.get("quant_method") if isinstance(qc, dict) else getattr(qc, "quant_method", None)
    method = getattr(method, "value", method)  # transformers may hold an enum
    return str(method).lower() if method else None


def resolve_quantization(requested: str | None, hf_config: Any, load_format: str = "auto") -> str:
    """The method name to select: ``requested`` if given (checked against the checkpoint), else the
    checkpoint's, else ``none``. Dummy weights follow the flag (the config may be a plain one)."""
    found = checkpoint_quant_method(hf_config)
    if requested is None:
        return found or UNQUANTIZED
    if found is not None and requested != found:
        raise IncompatibleChoiceError(
            f"--quantization {requested} does not match the checkpoint, which is quantized with '{found}' "
            f"(config.json quantization_config.quant_method); drop the flag or pass --quantization {found}."
        )
    if found is None and requested != UNQUANTIZED and load_format != "dummy":
        raise IncompatibleChoiceError(
            f"--quantization {requested} needs a checkpoint quantized with '{requested}', but config.json has no "
            "quantization_config; use a quantized checkpoint, or drop the flag for this dense one."
        )
    return requested
