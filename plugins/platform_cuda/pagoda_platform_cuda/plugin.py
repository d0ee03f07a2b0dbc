"""Pagoda plugin 'platform-cuda' (distribution pagoda-platform-cuda).

Registers the platform ``cuda``: NVIDIA GPUs through torch.cuda, with the fused kernels built
from ``csrc/`` (RMSNorm, rotary embedding, SiLU-and-mul, KV-cache writes) and KV cache sizing
from free memory after a profiled forward. ``check()`` says why it cannot run here (a CPU-only
torch, no CUDA device). Importing this module imports no CUDA code; the kernels load (or
compile) when an engine first asks the platform for its custom ops.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_platforms(register: Register) -> None:
    from pagoda_platform_cuda.platform import CudaPlatform

    register("cuda", CudaPlatform)
