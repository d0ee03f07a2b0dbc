"""The compiled kernel: ``paged_attention.cpp``, built on first use (about 20 s on 2 cores, with the C++ compiler
and ninja) and cached under ``TORCH_EXTENSIONS_DIR`` (:mod:`pagoda.platforms.cpu_extension`). Anything that
prevents the build raises ExtensionUnavailable with a one-line reason, which the backend's ``check`` reports
(``auto`` then keeps the ``torch`` backend).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

from pagoda.platforms.cpu_extension import load_cpu_extension

SOURCE = Path(__file__).resolve().parent / "paged_attention.cpp"


@functools.cache
def load_kernel() -> ModuleType:
    """The module with ``paged_attention`` (cached for the process); raises ExtensionUnavailable."""
    return load_cpu_extension("pagoda_attention_cpu_C", SOURCE, "the CPU attention kernel",
                              "use --attention-backend torch")
