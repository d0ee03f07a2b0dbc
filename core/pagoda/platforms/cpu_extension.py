"""Compiling a CPU plugin's C++ source on first use: ``torch.utils.cpp_extension.load`` builds it (with the C++
compiler and ninja) and caches the build under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``);
later runs load the cached module, and an edited source is rebuilt. Anything that prevents the build raises
:class:`~pagoda.platforms.csrc.ExtensionUnavailable` with a one-line reason and the way on.

Flags: ``-march=native`` (compiled on the machine it runs on: AVX-512 where it has it); ``-fopenmp`` (the
kernels' threads are OpenMP's, torch's own pool: the process loads one OpenMP runtime).
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from types import ModuleType

from pagoda.platforms.csrc import ExtensionUnavailable, first_line

logger = logging.getLogger(__name__)
CXX_FLAGS = ["-O3", "-march=native", "-fopenmp"]
LD_FLAGS = ["-fopenmp"]
COMPILED_S = 2.0  # a load slower than this compiled


def load_cpu_extension(name: str, source: Path, what: str, fallback: str) -> ModuleType:
    """The module compiled from ``source`` as ``name``; ``what`` names it in the log ("the CPU attention kernel"),
    ``fallback`` is the way on without it ("use --attention-backend torch")."""
    from torch.utils import cpp_extension

    if not cpp_extension.is_ninja_available():
        raise ExtensionUnavailable("no ninja to compile it (pip install ninja)")
    start = time.perf_counter()
    try:
        module = cpp_extension.load(name=name, sources=[str(source)], extra_cflags=CXX_FLAGS, extra_ldflags=LD_FLAGS)
    except Exception as error:  # compiler errors arrive as RuntimeError / CalledProcessError
        raise ExtensionUnavailable(f"the C++ build failed ({compiler_message(error)}); install a C++ compiler such "
                                   f"as g++, or {fallback}") from error
    seconds = time.perf_counter() - start
    if seconds > COMPILED_S:  # a load from torch's cache takes a fraction of a second
        logger.info("compiled %s in %.1f s (first use; later runs load the cached build)", what, seconds)
    return module


def compiler_message(error: BaseException) -> str:
    """The line of a failed build that says what went wrong (the first names only the command that failed)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    reason = next((line for line in lines[1:] if re.search(r"error|not found|no such file", line, re.IGNORECASE)), None)
    return reason or first_line(error)
