"""Build pagoda_platform_rocm._C ahead of time when torch has HIP and hipcc is found.

Everything else (metadata, packages, entry points) is in pyproject.toml. The manifest's sources
(csrc/manifest.txt, minus the nvidia_only ones) are hipified into build/hip_csrc with torch's
hipify tooling and compiled by hipcc through torch's extension tools, for PYTORCH_ROCM_ARCH
(else the gfx target of GPU 0). Without a ROCm torch (a CUDA or CPU machine, an isolated build,
PAGODA_ROCM_BUILD=0) this builds nothing and the kernels compile at first use instead
(pagoda_platform_rocm/build.py). The csrc sources are copied into the package either way.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CSRC = HERE.parents[1] / "csrc"
sys.path.insert(0, str(HERE))  # pagoda_platform_rocm.hipify (torch and stdlib only), before it is installed


class BuildPyWithSources(build_py):
    """Also copy ../../csrc into pagoda_platform_rocm/csrc/ of the build (for the first-use build)."""

    def run(self) -> None:
        super().run()
        if CSRC.is_dir():
            dest = Path(self.build_lib) / "pagoda_platform_rocm" / "csrc"
            shutil.copytree(CSRC, dest, ignore=shutil.ignore_patterns("*.md", "__pycache__"), dirs_exist_ok=True)


def _core_module(path: str):
    """A stdlib-only module of the core (platforms/csrc.py, envs.py), loaded from the checkout by path: pip
    may build this plugin before the pagoda it installs in the same command is importable."""
    spec = importlib.util.spec_from_file_location(f"_pagoda_{Path(path).stem}", HERE.parents[1] / "core/pagoda" / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rocm_extensions() -> tuple[list, dict]:
    """The extension and its build command, or nothing where it cannot be built here."""
    if not CSRC.is_dir():
        return [], {}
    envs = _core_module("envs.py")
    build = envs.ROCM_BUILD.get()  # auto, 0 or 1
    if build == "0":
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import ROCM_HOME, BuildExtension, CUDAExtension
    except ImportError:  # an isolated build without torch: compile at first use instead
        return [], {}
    forced = build == "1"
    if torch.version.hip is None or ROCM_HOME is None or not (torch.cuda.is_available() or forced):
        return [], {}
    if not os.environ.get("PYTORCH_ROCM_ARCH") and torch.cuda.is_available():
        os.environ["PYTORCH_ROCM_ARCH"] = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
    from pagoda_platform_rocm.hipify import CXX_FLAGS, HIPCC_FLAGS, hipify_csrc, rocm_sources

    tools, staged = _core_module("platforms/csrc.py"), HERE / "build" / "hip_csrc"
    sources = hipify_csrc(CSRC, staged, rocm_sources(tools.read_manifest(CSRC)))
    ext = CUDAExtension(
        name="pagoda_platform_rocm._C",
        sources=[path.relative_to(HERE).as_posix() for path in sources],
        include_dirs=[str(staged)],
        extra_compile_args={"cxx": CXX_FLAGS, "nvcc": HIPCC_FLAGS},
        extra_link_args=tools.SHARED_CXX_RUNTIME,
    )
    return [ext], {"build_ext": tools.deferring_build_ext(BuildExtension, "pagoda-platform-rocm")}


extensions, commands = rocm_extensions()
setup(ext_modules=extensions, cmdclass={"build_py": BuildPyWithSources, **commands})
