"""Pagoda plugin 'quant-fp8' (distribution pagoda-quant-fp8).

Registers two W8A8 quantization methods through the ``register_quantization_methods`` hook:

- ``fp8``: linear layers with FP8 (e4m3) weights and dynamically (or statically) scaled FP8
  activations, multiplied by ``torch._scaled_mm`` on GPUs of compute capability >= 8.9. It reads FP8
  checkpoints (``quant_method`` ``fp8`` and float-quantized ``compressed-tensors``) and quantizes float
  checkpoints at load. ``check()`` says why it cannot run ("fp8 needs compute capability >= 8.9").
- ``int8``: W8A8-INT8, int8 weights per output channel and int8 activations per token, on int8
  tensor cores (a Triton kernel) or ``torch._int_mm`` (CPUs). It reads int-quantized
  ``compressed-tensors`` checkpoints and quantizes float checkpoints at load.
"""

from __future__ import annotations

from pagoda.hookspecs import hookimpl


@hookimpl
def register_quantization_methods(register) -> None:
    """``fp8`` and ``int8``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_quant_fp8.int8_method import Int8Method
    from pagoda_quant_fp8.method import Fp8Method

    register("fp8", Fp8Method)
    register("int8", Int8Method)
