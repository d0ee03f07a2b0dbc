"""The compiled kernels: ``fused_ops.cpp``, built on first use (about 15 s on 2 cores, with the C++ compiler and
ninja) and cached under ``TORCH_EXTENSIONS_DIR`` (:mod:`pagoda.platforms.cpu_extension`). Anything that prevents
the build raises ExtensionUnavailable with a one-line reason, which the platform's ``check`` reports (``auto``
then picks the built-in ``cpu`` platform).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

from pagoda.platforms.cpu_extension import load_cpu_extension

SOURCE = Path(__file__).resolve().parent / "fused_ops.cpp"


@functools.cache
def load_kernels() -> ModuleType:
    """The module with ``rms_norm``, ``silu_and_mul`` and ``rotary_embedding`` (cached for the process); raises
    ExtensionUnavailable."""
    return load_cpu_extension("pagoda_platform_cpu_C", SOURCE, "the CPU platform's kernels", "use --platform cpu")
