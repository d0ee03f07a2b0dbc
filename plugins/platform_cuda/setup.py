"""Build pagoda_platform_cuda._C ahead of time when torch has CUDA and nvcc is found.

Everything else (metadata, packages, entry points) is in pyproject.toml. Without CUDA (a CPU
machine, an isolated build without torch, PAGODA_CUDA_BUILD=0) this builds nothing and the
kernels compile at first use instead (pagoda_platform_cuda/build.py). The csrc sources are copied
into the package either way, so that first-use build finds them after installation.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
SOURCES = ("bindings.cpp", "layernorm_kernels.cu", "rotary_kernels.cu", "activation_kernels.cu", "cache_kernels.cu")
# the attention kernels of pagoda-attention-flash: their own module, so a failure there spares _C
FLASH_SOURCES = ("attention/flash_bindings.cpp", "attention/decode_kernels.cu", "attention/prefill_kernels.cu",
                 "cache_kernels.cu")
SUFFIXES = (".cu", ".cuh", ".h", ".cpp")


def _copy_sources(dest: Path) -> None:
    """csrc/*.{cu,cuh,h,cpp} and csrc/attention/* into ``dest`` (same layout)."""
    for folder in (CSRC, CSRC / "attention"):
        if not folder.is_dir():
            continue
        target = dest / folder.relative_to(CSRC)
        target.mkdir(parents=True, exist_ok=True)
        for path in folder.iterdir():
            if path.suffix in SUFFIXES:
                shutil.copy2(path, target / path.name)


class BuildPyWithSources(build_py):
    """Also copy ../../csrc/*.{cu,cuh,h,cpp} (and csrc/attention/) into pagoda_platform_cuda/csrc/ of the build."""

    def run(self) -> None:
        super().run()
        if not CSRC.is_dir():
            return
        _copy_sources(Path(self.build_lib) / "pagoda_platform_cuda" / "csrc")


def _stage_sources() -> str:
    """Copy csrc under build/ (setuptools takes only paths relative to setup.py); returns that path."""
    staged = Path("build") / "csrc"
    _copy_sources(HERE / staged)
    return staged.as_posix()


def cuda_extensions() -> tuple[list, dict]:
    """The extension and its build command, or nothing where it cannot be built here."""
    if os.environ.get("PAGODA_CUDA_BUILD", "auto") == "0" or not CSRC.is_dir():
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError:  # an isolated build without torch: compile at first use instead
        return [], {}
    forced = os.environ.get("PAGODA_CUDA_BUILD") == "1"
    if torch.version.cuda is None or CUDA_HOME is None or not (torch.cuda.is_available() or forced):
        return [], {}
    staged = _stage_sources()
    exts = [
        CUDAExtension(
            name=f"pagoda_platform_cuda.{module}",
            sources=[f"{staged}/{name}" for name in sources],
            include_dirs=[str(HERE / staged)],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--expt-relaxed-constexpr"]},
        )
        for module, sources in (("_C", SOURCES), ("_flash", FLASH_SOURCES))
    ]

    class BuildOrDefer(BuildExtension):
        """A failed compile must not fail the install: the kernels then build at first use."""

        def run(self) -> None:
            try:
                super().run()
            except Exception as error:  # noqa: BLE001 - any compiler failure
                print(f"pagoda-platform-cuda: ahead-of-time kernel build failed ({error}); deferring to first use")

    return exts, {"build_ext": BuildOrDefer}


extensions, commands = cuda_extensions()
setup(ext_modules=extensions, cmdclass={"build_py": BuildPyWithSources, **commands})
