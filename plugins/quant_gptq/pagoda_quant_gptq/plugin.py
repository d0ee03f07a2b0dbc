"""Pagoda plugin 'quant-gptq' (distribution pagoda-quant-gptq).

Registers two quantization methods, selected automatically from config.json's ``quantization_config``:

- ``gptq``: GPTQ checkpoints (AutoGPTQ / GPTQModel / optimum: ``qweight``, ``qzeros``, ``scales``,
  ``g_idx``), 4 or 8 bits, group size 32/64/128 or per channel, symmetric or not, act-order.
- ``wna16``: compressed-tensors ``pack-quantized`` weight-only checkpoints (llm-compressor's W4A16 and
  W8A16: ``weight_packed``, ``weight_scale``, ``weight_zero_point``), group or channel strategy.

Both are repacked at load into the layouts of pagoda-quant-awq, whose kernels compute them: the
tensor-core tiles kernel on NVIDIA sm_80+, its Triton and CUDA kernels elsewhere, torch on CPUs.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_quantization_methods(register: Register) -> None:
    from pagoda_quant_gptq.method import GptqMethod, Wna16Method

    register("gptq", GptqMethod)
    register("wna16", Wna16Method)
