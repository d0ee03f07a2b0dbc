"""Pagoda plugin 'platform-cpu' (distribution pagoda-platform-cpu).

Registers the platform ``cpu-native``: the built-in CPU platform with RMSNorm (and its residual add),
SiLU-and-multiply and the rotary embedding as compiled one-pass kernels, through the ``register_platforms`` hook.
"""

from __future__ import annotations

from pagoda.hookspecs import Register, hookimpl


@hookimpl
def register_platforms(register: Register) -> None:
    """``cpu-native``: imported here, not at module top, so ``pagoda plugins`` stays light."""
    from pagoda_platform_cpu.platform import NativeCpuPlatform

    register("cpu-native", NativeCpuPlatform)
