"""Build and load the csrc kernels as a torch extension.

Two ways, tried in order by :func:`load_extension`:

1. ahead of time: ``pip install`` builds ``pagoda_platform_cuda._C`` when torch has CUDA and
   nvcc is found (see ``setup.py``); importing it costs nothing;
2. just in time: ``torch.utils.cpp_extension.load`` compiles the sources on first use and caches
   the result under ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``).

Anything that prevents both raises :class:`ExtensionUnavailable` with a one-line reason; the
platform then falls back to the torch ops (see ``CudaPlatform.custom_ops``).

:func:`load_flash_extension` does the same for the attention kernels of ``csrc/attention/``
(module ``pagoda_platform_cuda._flash``, used by pagoda-attention-flash): a separate module, so a
failure there never costs the other kernels, and they compile only where flash is wanted.
"""

from __future__ import annotations

import functools
import importlib
import os
from pathlib import Path
from types import ModuleType

JIT_NAME = "pagoda_cuda_C"
SOURCE_FILES = (
    "bindings.cpp",
    "layernorm_kernels.cu",
    "rotary_kernels.cu",
    "activation_kernels.cu",
    "cache_kernels.cu",
)
FLASH_JIT_NAME = "pagoda_flash_C"
FLASH_SOURCE_FILES = (
    "attention/flash_bindings.cpp",
    "attention/decode_kernels.cu",
    "attention/prefill_kernels.cu",
    "cache_kernels.cu",
)
NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr"]
CXX_FLAGS = ["-O3"]


class ExtensionUnavailable(RuntimeError):
    """The kernels can be neither imported nor compiled here; the message says why."""


def source_dir(files: tuple[str, ...] = SOURCE_FILES) -> Path | None:
    """The csrc folder: packaged next to this module on install, or the repository's own."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "csrc", here.parents[2] / "csrc"):
        if all((candidate / name).is_file() for name in files):
            return candidate
    return None


@functools.cache
def load_extension() -> ModuleType:
    """The compiled kernels module (cached for the process); raises ExtensionUnavailable."""
    return _load("pagoda_platform_cuda._C", JIT_NAME, SOURCE_FILES)


@functools.cache
def load_flash_extension() -> ModuleType:
    """The flash attention kernels module (cached); raises ExtensionUnavailable with the reason."""
    return _load("pagoda_platform_cuda._flash", FLASH_JIT_NAME, FLASH_SOURCE_FILES)


def _load(module: str, jit_name: str, files: tuple[str, ...]) -> ModuleType:
    if os.environ.get("PAGODA_CUDA_KERNELS", "1") == "0":
        raise ExtensionUnavailable("PAGODA_CUDA_KERNELS=0 switches the CUDA kernels off")
    import torch  # noqa: F401 - loads libc10/libtorch, which the compiled module links against

    try:
        return importlib.import_module(module)
    except ImportError as error:
        aot_error = error
    return _jit_build(aot_error, jit_name, files)


def _jit_build(aot_error: ImportError, name: str, files: tuple[str, ...]) -> ModuleType:
    import torch
    from torch.utils import cpp_extension

    if torch.version.cuda is None:
        raise ExtensionUnavailable(f"torch {torch.__version__} has no CUDA")
    if cpp_extension.CUDA_HOME is None:
        raise ExtensionUnavailable(f"no nvcc (CUDA_HOME not found; the prebuilt module is missing: {aot_error})")
    if not cpp_extension.is_ninja_available():
        raise ExtensionUnavailable("no ninja to compile the kernels at first use (pip install ninja)")
    sources = source_dir(files)
    if sources is None:
        raise ExtensionUnavailable("the csrc sources are not installed with pagoda-platform-cuda")
    try:
        return cpp_extension.load(
            name=name,
            sources=[str(sources / file) for file in files],
            extra_cflags=CXX_FLAGS,
            extra_cuda_cflags=NVCC_FLAGS,
            extra_include_paths=[str(sources)],
            verbose=os.environ.get("PAGODA_CUDA_BUILD_VERBOSE") == "1",
        )
    except Exception as error:  # compiler errors arrive as RuntimeError / CalledProcessError
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExtensionUnavailable(f"build error: {first}") from error
