"""Build and load the hipified csrc kernels as a torch extension (a ROCm build of torch).

Two ways, tried in order by :func:`load_extension`:

1. ahead of time: ``pip install`` builds ``pagoda_platform_rocm._C`` when torch has HIP and
   hipcc is found (see ``setup.py``);
2. at first use: the sources are hipified (``hipify.py``) under ``TORCH_EXTENSIONS_DIR`` and
   ``torch.utils.cpp_extension.load`` compiles them with hipcc for this GPU's gfx target.

The ``nvidia_only`` sources of ``csrc/manifest.txt`` are left out of both; ``excluded_reason``
tells backends why. Anything else that prevents both raises :class:`ExtensionUnavailable`; the
platform then falls back to the torch ops (``RocmPlatform.custom_ops``).
"""

from __future__ import annotations

import functools
import os
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

__all__ = ["ExtensionUnavailable", "excluded_reason", "load_extension", "source_dir"]

JIT_NAME = "pagoda_rocm_C"


def source_dir() -> Path | None:
    """The csrc folder: packaged next to this module on install, or the repository's own."""
    return find_csrc(Path(__file__).resolve().parent)


def excluded_reason(name: str) -> str | None:
    """Why the csrc kernels ``name`` are not in the ROCm build (``None`` if they are)."""
    csrc = source_dir()
    if csrc is None:
        return "the csrc sources are not installed with pagoda-platform-rocm"
    for source in read_manifest(csrc):
        if source.matches(name) and source.nvidia_only:
            return f"csrc/{source.path} uses NVIDIA-only instructions ({source.nvidia_only}), so the ROCm build leaves it out"
    return None


@functools.cache
def load_extension(arch: str) -> ModuleType:
    """The compiled kernels module for gfx target ``arch`` (cached); raises ExtensionUnavailable."""
    return load_compiled("pagoda_platform_rocm._C", envs.ROCM_KERNELS, "ROCm", lambda error: _jit_build(arch, error))


def _jit_build(arch: str, aot_error: ImportError) -> ModuleType:
    import torch
    from torch.utils import cpp_extension

    csrc = jit_sources(torch.version.hip, "HIP", cpp_extension.ROCM_HOME, "hipcc", source_dir(),
                       "pagoda-platform-rocm", aot_error)
    from pagoda_platform_rocm.hipify import CXX_FLAGS, HIPCC_FLAGS, hipify_csrc, rocm_sources

    out = Path(os.environ.get("TORCH_EXTENSIONS_DIR", Path.home() / ".cache" / "torch_extensions")) / "pagoda_rocm_hipified"
    arch_flags = [] if os.environ.get("PYTORCH_ROCM_ARCH") else [f"--offload-arch={arch}"]
    try:
        sources = hipify_csrc(csrc, out, rocm_sources(read_manifest(csrc)))
        return cpp_extension.load(
            name=JIT_NAME,
            sources=[str(path) for path in sources],
            extra_cflags=CXX_FLAGS,
            extra_cuda_cflags=HIPCC_FLAGS + arch_flags,
            extra_ldflags=SHARED_CXX_RUNTIME,
            extra_include_paths=[str(out)],
            verbose=envs.ROCM_BUILD_VERBOSE.get(),
        )
    except Exception as error:  # compiler errors arrive as RuntimeError / CalledProcessError
        raise ExtensionUnavailable(f"build error: {first_line(error)}") from error
