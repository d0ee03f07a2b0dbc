"""Build pagoda_platform_cuda._C ahead of time when torch has CUDA and nvcc is found.

Everything else (metadata, packages, entry points) is in pyproject.toml. Without CUDA (a CPU
machine, an isolated build without torch, PAGODA_CUDA_BUILD=0) this builds nothing and the
kernels compile at first use instead (pagoda_platform_cuda/build.py). The csrc sources are copied
into the package either way, so that first-use build finds them after installation.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
CSRC_FILES = shutil.ignore_patterns("*.md", "__pycache__")  # sources, headers and manifest.txt, with subfolders


class BuildPyWithSources(build_py):
    """Also copy ../../csrc (sources, headers, manifest.txt) into pagoda_platform_cuda/csrc/ of the build."""

    def run(self) -> None:
        super().run()
        if CSRC.is_dir():
            shutil.copytree(CSRC, Path(self.build_lib) / "pagoda_platform_cuda" / "csrc", ignore=CSRC_FILES,
                            dirs_exist_ok=True)


def _stage_sources() -> str:
    """Copy csrc under build/ (setuptools takes only paths relative to setup.py); returns that path."""
    staged = Path("build") / "csrc"
    shutil.copytree(CSRC, HERE / staged, ignore=CSRC_FILES, dirs_exist_ok=True)
    return staged.as_posix()


def _core_module(path: str):
    """A stdlib-only module of the core (platforms/csrc.py, envs.py), loaded from the checkout by path: pip
    may build this plugin before the pagoda it installs in the same command is importable."""
    spec = importlib.util.spec_from_file_location(f"_pagoda_{Path(path).stem}", HERE.parents[1] / "core/pagoda" / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def cuda_extensions() -> tuple[list, dict]:
    """The extension and its build command, or nothing where it cannot be built here."""
    if not CSRC.is_dir():
        return [], {}
    envs = _core_module("envs.py")
    build = envs.CUDA_BUILD.get()  # auto, 0 or 1
    if build == "0":
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError:  # an isolated build without torch: compile at first use instead
        return [], {}
    forced = build == "1"
    if torch.version.cuda is None or CUDA_HOME is None or not (torch.cuda.is_available() or forced):
        return [], {}
    staged, tools = _stage_sources(), _core_module("platforms/csrc.py")
    ext = CUDAExtension(
        name="pagoda_platform_cuda._C",
        sources=[f"{staged}/{s.path}" for s in tools.read_manifest(CSRC)],
        include_dirs=[str(HERE / staged)],
        extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--expt-relaxed-constexpr"]},
        extra_link_args=tools.SHARED_CXX_RUNTIME,
    )
    return [ext], {"build_ext": tools.deferring_build_ext(BuildExtension, "pagoda-platform-cuda")}


extensions, commands = cuda_extensions()
setup(ext_modules=extensions, cmdclass={"build_py": BuildPyWithSources, **commands})
