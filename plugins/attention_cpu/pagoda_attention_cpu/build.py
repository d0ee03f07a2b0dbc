"""The compiled kernel: ``torch.utils.cpp_extension.load`` compiles ``paged_attention.cpp`` on first use (about
20 s on 2 cores, with the C++ compiler and ninja) and caches it under ``TORCH_EXTENSIONS_DIR`` (default
``~/.cache/torch_extensions``); later runs load the cached module, and an edited source is rebuilt. Anything that
prevents the build raises ExtensionUnavailable with a one-line reason, which the backend's ``check`` reports
(``auto`` then keeps the ``torch`` backend).

Flags: ``-march=native`` (compiled on the machine it runs on: AVX-512 where it has it); ``-fopenmp`` (the kernel's
tasks run on OpenMP threads, torch's own pool: the process loads one OpenMP runtime; serially without it).
"""

from __future__ import annotations

import functools
import logging
import re
import time
from pathlib import Path
from types import ModuleType

from pagoda.platforms.csrc import ExtensionUnavailable, first_line

logger = logging.getLogger(__name__)
SOURCE = Path(__file__).resolve().parent / "paged_attention.cpp"
JIT_NAME = "pagoda_attention_cpu_C"
CXX_FLAGS = ["-O3", "-march=native", "-fopenmp"]
LD_FLAGS = ["-fopenmp"]
COMPILED_S = 2.0  # a load slower than this compiled


@functools.cache
def load_kernel() -> ModuleType:
    """The module with ``paged_attention`` (cached for the process); raises ExtensionUnavailable."""
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        raise ExtensionUnavailable("no ninja to compile it (pip install ninja)")
    start = time.perf_counter()
    try:
        module = cpp_extension.load(name=JIT_NAME, sources=[str(SOURCE)], extra_cflags=CXX_FLAGS,
                                    extra_ldflags=LD_FLAGS)
    except Exception as error:  # compiler errors arrive as RuntimeError / CalledProcessError
        raise ExtensionUnavailable(f"the C++ build failed ({compiler_message(error)}); install a C++ compiler such "
                                   "as g++, or use --attention-backend torch") from error
    seconds = time.perf_counter() - start
    if seconds > COMPILED_S:  # a load from torch's cache takes a fraction of a second
        logger.info("compiled the CPU attention kernel in %.1f s (first use; later runs load the cached build)", seconds)
    return module


def compiler_message(error: BaseException) -> str:
    """The line of a failed build that says what went wrong (the first names only the command that failed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines[1:] if re.search(r"error|not found|no such file", line, re.IGNORECASE)), None)
    return reason or first_line(error)
