"""Which quantization method a model uses: ``--quantization``, else the checkpoint's own.

A quantized HF checkpoint names its method in config.json (``quantization_config.quant_method``,
e.g. ``"awq"``). Without ``--quantization`` (or with ``auto``) that method is used (renamed through
``METHOD_OF_QUANT_METHOD`` where a Pagoda method reads another format's name), else ``none``. An explicit method
may differ from the checkpoint's (online quantization, dummy weights); each method checks the
``quantization_config`` it is given. Only ``none`` on a quantized checkpoint is refused here: dense
layers cannot hold quantized tensors. No installed method is ever chosen for a checkpoint that
declares none: ``auto`` never quantizes a model nobody asked to quantize.
"""

from __future__ import annotations

from typing import Any

from pagoda.errors import IncompatibleChoiceError

UNQUANTIZED = "none"
AUTO = "auto"

# quant_method in config.json -> the registered method that reads it (others keep their name)
METHOD_OF_QUANT_METHOD: dict[str, str] = {
    "compressed-tensors": "fp8",  # float-quantized W8A8; pagoda-quant-fp8 names the schemes it refuses
}


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
        return METHOD_OF_QUANT_METHOD.get(found, found) if found else UNQUANTIZED
    if requested == UNQUANTIZED and found is not None:
        raise IncompatibleChoiceError(
            f"--quantization none cannot load this checkpoint: it is quantized with '{found}' (config.json "
            f"quantization_config.quant_method); drop the flag or pass --quantization {found}."
        )
    return requested
