"""The csrc kernels as the GPU platform plugins see them: the manifest, the sources, loading.

``csrc/manifest.txt`` lists every source to compile, one per line, with an optional
``nvidia_only: <why>`` for sources that use NVIDIA-only instructions (pagoda-platform-rocm
leaves those out). Sources under ``kernels/`` and ``attention/`` are device code without torch headers;
the rest is the torch binding layer. Both GPU platform plugins read the list from here, so a new kernel
joins both builds with one line.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pagoda.envs import Switch

MANIFEST = "manifest.txt"
KERNEL_LAYER = ("kernels/", "attention/")  # sources here include no torch header
NVIDIA_ONLY = "nvidia_only:"
# Link flags of both extensions: the process's shared C++ runtime (libstdc++.so.6), ahead of any static
# copy a compiler adds by default. The GPU machine's g++ (/opt/gcc) linked libstdc++ statically, and the
# extension's own copy of the streams crashed (SIGSEGV) formatting an integer into a failed check's message.
SHARED_CXX_RUNTIME = ["-Wl,-Bdynamic", "-l:libstdc++.so.6"]


class ExtensionUnavailable(RuntimeError):
    """The kernels can be neither imported nor compiled here; the message says why."""


@dataclass(frozen=True)
class CsrcSource:
    path: str  # relative to csrc/, e.g. "kernels/layernorm.cu"
    nvidia_only: str | None = None  # why it cannot be hipified (NVIDIA-only instructions)

    @property
    def kernel_layer(self) -> bool:
        return self.path.startswith(KERNEL_LAYER)

    def matches(self, name: str) -> bool:
        """``name`` is this path, its file stem, or a folder holding it (``"attention"``)."""
        return name in (self.path, Path(self.path).stem) or self.path.startswith(name.rstrip("/") + "/")


def read_manifest(csrc: Path) -> list[CsrcSource]:
    """The sources listed in ``csrc/manifest.txt``, in order."""
    sources = []
    for number, raw in enumerate((csrc / MANIFEST).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        path, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest and not rest.startswith(NVIDIA_ONLY):
            raise ValueError(f"{csrc / MANIFEST}:{number}: expected '<path> [{NVIDIA_ONLY} <why>]', got {raw!r}")
        reason = rest.removeprefix(NVIDIA_ONLY).strip() if rest else None
        if reason == "":
            raise ValueError(f"{csrc / MANIFEST}:{number}: '{NVIDIA_ONLY}' needs a reason (which instructions)")
        sources.append(CsrcSource(path, reason))
    _check_unique_stems(csrc / MANIFEST, sources)
    return sources


def _check_unique_stems(manifest: Path, sources: list[CsrcSource]) -> None:
    """torch's JIT build names object files by file stem: two sources with one stem collide."""
    seen: dict[str, str] = {}
    for source in sources:
        stem = Path(source.path).stem
        if stem in seen:
            raise ValueError(f"{manifest}: {seen[stem]} and {source.path} share the file name '{stem}'; rename one")
        seen[stem] = source.path


def find_csrc(package_dir: Path) -> Path | None:
    """The csrc folder: packaged as ``<package>/csrc`` on install, or the repository's own."""
    for candidate in (package_dir / "csrc", package_dir.parents[2] / "csrc"):
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def load_compiled(aot_module: str, switch: "Switch", label: str, jit: Callable[[ImportError], ModuleType]) -> ModuleType:
    """The prebuilt module ``aot_module``, else ``jit(import_error)``; ``switch`` (a pagoda.envs variable)
    off turns both off."""
    if not switch.get():
        raise ExtensionUnavailable(f"{switch.name}=0 switches the {label} kernels off")
    import torch  # noqa: F401 - loads libc10/libtorch, which the compiled module links against

    try:
        return importlib.import_module(aot_module)
    except ImportError as error:
        return jit(error)


def jit_sources(runtime: str | None, runtime_name: str, compiler_home: str | None, compiler: str,
                csrc: Path | None, distribution: str, aot_error: ImportError) -> Path:
    """``csrc`` once a first-use build has what it needs (a torch built for ``runtime_name``, the
    ``compiler``, ninja, the sources); otherwise ExtensionUnavailable naming what is missing."""
    import torch
    from torch.utils import cpp_extension

    if runtime is None:
        raise ExtensionUnavailable(f"torch {torch.__version__} has no {runtime_name}")
    if compiler_home is None:
        raise ExtensionUnavailable(f"no {compiler} (its toolkit was not found; the prebuilt module is missing: {aot_error})")
    if not cpp_extension.is_ninja_available():
        raise ExtensionUnavailable("no ninja to compile the kernels at first use (pip install ninja)")
    if csrc is None:
        raise ExtensionUnavailable(f"the csrc sources are not installed with {distribution}")
    return csrc


def first_line(error: BaseException) -> str:
    """A compiler failure's first line (they arrive as long RuntimeError / CalledProcessError texts)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def deferring_build_ext(build_ext: type, label: str) -> type:
    """``build_ext`` (torch's BuildExtension) whose failure does not fail ``pip install``: the
    kernels then compile at first use instead, and the install log says why."""

    class BuildOrDefer(build_ext):
        def run(self) -> None:
            try:
                super().run()
            except Exception as error:  # noqa: BLE001 - any compiler failure
                print(f"{label}: ahead-of-time kernel build failed ({error}); deferring to first use")

    return BuildOrDefer
