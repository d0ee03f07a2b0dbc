"""Pick the quantization method a checkpoint needs from config.json's ``quantization_config``.

Used when ``--quantization`` is not given: a checkpoint saved quantized names its format in
``quantization_config.quant_method``; the table maps that name to the Pagoda method that reads
it (the method itself rejects the variants it does not support, with the reason).
"""

from __future__ import annotations

from typing import Any

# quant_method in config.json -> registered quantization method name
METHOD_OF_QUANT_METHOD: dict[str, str] = {
    "fp8": "fp8",
    "compressed-tensors": "fp8",  # float-quantized W8A8; pagoda-quant-fp8 rejects other schemes clearly
}


def detect_quantization(hf_config: Any) -> str | None:
    """The method for ``hf_config``'s ``quantization_config``, ``None`` if unquantized.

    A ``quant_method`` missing from the table is returned as is, so selecting it fails with the
    registry's "unknown quantization method ... available: ..." error rather than a load error.
    """
    quant_config = getattr(hf_config, "quantization_config", None)
    if not quant_config:
        return None
    if not isinstance(quant_config, dict):
        quant_config = quant_config.to_dict()
    name = str(quant_config.get("quant_method", "")).lower()
    return METHOD_OF_QUANT_METHOD.get(name, name) or None
