"""``NativeCpuPlatform``: the built-in CPU platform, its element-wise layers compiled (:mod:`pagoda_platform_cpu.ops`).

Everything else (oneDNN products, the KV cache's lazy pages, threads, dtypes) is the built-in platform's. ``auto``
prefers it to ``cpu`` where its kernels build; ``--platform cpu`` keeps the built-in one.
"""

from __future__ import annotations

from pagoda.interfaces.ops import CustomOps
from pagoda.platforms.cpu import CpuPlatform
from pagoda.platforms.csrc import ExtensionUnavailable


class NativeCpuPlatform(CpuPlatform):
    description = "CPU with compiled one-pass RMSNorm, SiLU-and-multiply and rotary kernels"
    priority = 1  # above the built-in cpu; below every GPU platform

    @classmethod
    def check(cls) -> str | None:
        from pagoda_platform_cpu.build import load_kernels

        try:
            load_kernels()
        except ExtensionUnavailable as error:
            return f"its C++ kernels are unavailable: {error}"
        return None

    def describe(self) -> str:
        return super().describe() + ", compiled element-wise kernels"

    def custom_ops(self) -> CustomOps:
        from pagoda_platform_cpu.build import load_kernels
        from pagoda_platform_cpu.ops import NativeCpuOps

        return NativeCpuOps(load_kernels())
