"""A quantized (FP8) KV cache in plain torch: store, read back, calibrate the per-tensor scales.

A key is stored as ``key / k_scale`` saturated to the format's largest finite value (e4m3: 448,
e5m2: 57344) and rounded to nearest even (:func:`pagoda.interfaces.attention.quantize_kv`); it is
read back as ``stored * k_scale`` (values alike). The attention backends' kernels follow the same
rules (their tests compare with these functions).

Calibration (``--calculate-kv-scales``) sets each scale from the largest magnitude of the first real
step's keys (values) so that it lands at ``1 / CALIBRATION_HEADROOM`` of the format's range.
Why the headroom: later prompts may have larger keys than the first step's, and a saturated key
distorts attention, while a smaller scale costs nothing in a floating format (its relative
precision is the same over its whole normal range; only values near the subnormals lose bits).
"""

from __future__ import annotations

import torch

from pagoda.interfaces.attention import KVScales, quantize_kv  # noqa: F401 - quantize_kv re-exported

CALIBRATION_HEADROOM = 2.0  # the first step's largest key maps to half the format's largest value
MIN_SCALE = 1e-8  # a step of all-zero keys leaves this scale, never 0 (no division by zero)


def format_max(dtype: torch.dtype) -> float:
    """The largest finite value of the FP8 format ``dtype`` (448 for e4m3fn, 57344 for e5m2)."""
    return float(torch.finfo(dtype).max)


def dequantize_kv(stored: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``stored * scale`` in ``dtype`` (the model's: attention computes in it)."""
    return (stored.float() * scale).to(dtype)


def calibrate(scales: KVScales, key: torch.Tensor, value: torch.Tensor, dtype: torch.dtype) -> None:
    """Set ``scales`` from this step's ``key``/``value`` (in place, on the device: no host sync), before they
    are stored. Tensor-parallel ranks hold different heads: ``scales.agree`` takes the largest magnitudes over
    the ranks, so every rank stores with the layer's scales, as one rank would."""
    amax = torch.stack([x.abs().amax().float() if x.numel() else torch.zeros((), device=x.device)
                        for x in (key, value)])  # [2]
    if scales.agree is not None:
        scales.agree(amax)
    scale = (amax / (format_max(dtype) / CALIBRATION_HEADROOM)).clamp_(min=MIN_SCALE)
    scales.k_scale.copy_(scale[0])
    scales.v_scale.copy_(scale[1])
