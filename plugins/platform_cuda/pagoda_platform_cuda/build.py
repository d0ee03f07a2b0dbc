"""Build and load the csrc kernels as a torch extension.

Two ways, tried in order by :func:`load_extension`:

1. ahead of time: ``pip install`` builds ``pagoda_platform_cuda._C`` when torch has CUDA and
   nvcc is found (see ``setup.py``); importing it costs nothing;
2. just in time: ``torch.utils.cpp_extension.load`` compiles the sources on first use and caches
   the result under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``).

The sources are those of ``csrc/manifest.txt`` (pagoda.platforms.csrc). Anything that prevents
both raises :class:`ExtensionUnavailable` with a one-line reason; the platform then falls back to
the torch ops (see ``CudaPlatform.custom_ops``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType

from pagoda import envs
from pagoda.platforms.csrc import (
    SHARED_CXX_RUNTIME,
    ExtensionUnavailable,
    find_csrc,
    first_line,
    jit_sources,
    load_compiled,
    read_manifest,
)

__all__ = ["ExtensionUnavailable", "load_extension", "source_dir"]

JIT_NAME = "pagoda_cuda_C"
NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr"]
CXX_FLAGS = ["-O3"]


def source_dir() -> Path | None:
    """The csrc folder: packaged next to this module on install, or the repository's own."""
    return find_csrc(Path(__file__).resolve().parent)


@functools.cache
def load_extension() -> ModuleType:
    """The compiled kernels module (cached for the process); raises ExtensionUnavailable."""
    return load_compiled("pagoda_platform_cuda._C", envs.CUDA_KERNELS, "CUDA", _jit_build)


def _jit_build(aot_error: ImportError) -> ModuleType:
    import torch
    from torch.utils import cpp_extension

    sources = jit_sources(torch.version.cuda, "CUDA", cpp_extension.CUDA_HOME, "nvcc", source_dir(),
                          "pagoda-platform-cuda", aot_error)
    try:
        return cpp_extension.load(
            name=JIT_NAME,
            sources=[str(sources / s.path) for s in read_manifest(sources)],
            extra_cflags=CXX_FLAGS,
            extra_cuda_cflags=NVCC_FLAGS,
            extra_ldflags=SHARED_CXX_RUNTIME,
            extra_include_paths=[str(sources)],
            verbose=envs.CUDA_BUILD_VERBOSE.get(),
        )
    except Exception as error:  # compiler errors arrive as RuntimeError / CalledProcessError
        raise ExtensionUnavailable(f"build error: {first_line(error)}") from error
