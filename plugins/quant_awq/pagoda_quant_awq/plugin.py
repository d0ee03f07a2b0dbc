"""Pagoda plugin 'quant-awq' (distribution pagoda-quant-awq).

Registers the quantization method ``awq``: AutoAWQ GEMM-format checkpoints (4-bit weights,
group size 32/64/128, zero points), selected automatically from config.json's
``quantization_config`` or with ``--quantization awq``. NVIDIA GPUs (sm_80+) repack the weights at
load for a tensor-core kernel built by pagoda-platform-cuda; other GPUs run the CUDA GEMV and Triton
kernels on the checkpoint's layout; CPUs the torch reference.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_quantization_methods(register: Register) -> None:
    from pagoda_quant_awq.method import AwqMethod

    register("awq", AwqMethod)
