"""Pagoda plugin 'platform-rocm' (distribution pagoda-platform-rocm).

Registers the platform ``rocm``: AMD GPUs (CDNA: MI100/MI200/MI300/MI350) through torch's ROCm
build, with the ``csrc/`` kernels hipified by torch's hipify tooling and compiled by hipcc,
KV cache sizing from free memory after a profiled forward, and HIP graphs for decode steps.
``check()`` says why it cannot run here (a CPU-only or CUDA build of torch, no ROCm device).
Importing this module imports no GPU code.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_platforms(register: Register) -> None:
    from pagoda_platform_rocm.platform import RocmPlatform

    register("rocm", RocmPlatform)
