"""Hipify the csrc sources with torch's hipify tooling (pure Python; any torch build has it).

The manifest's sources that are not ``nvidia_only`` are copied with every header into a build
folder and translated there: ``.cu`` -> ``.hip``, headers -> ``*_hip.h`` and CUDA API names
-> HIP ones. The originals in ``csrc/`` are never touched. The result compiles with ``hipcc``:
the kernel layer (``kernels/``) on its own, the torch layer against a ROCm build of torch.
"""

from __future__ import annotations

import contextlib
import io
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # no pagoda import at run time: setup.py runs this before pagoda is importable
    from pagoda.platforms.csrc import CsrcSource

HEADER_SUFFIXES = (".h", ".cuh", ".hpp")
ROCM_DEFINES = ["-DUSE_ROCM=1"]  # compat.h picks the HIP side with it
HIPCC_FLAGS = ["-O3", *ROCM_DEFINES]
CXX_FLAGS = ["-O3", *ROCM_DEFINES]


def rocm_sources(manifest: Sequence[CsrcSource]) -> list[CsrcSource]:
    """The manifest's sources that the ROCm build compiles (everything not ``nvidia_only``)."""
    return [s for s in manifest if s.nvidia_only is None]


def hipify_csrc(csrc: Path, out: Path, sources: Sequence[CsrcSource]) -> list[Path]:
    """Hipified copies of ``sources`` (paths under ``csrc``, in order) under ``out``, which is replaced."""
    keep = {s.path for s in sources}
    shutil.rmtree(out, ignore_errors=True)
    for path in sorted(csrc.rglob("*")):
        rel = path.relative_to(csrc).as_posix()
        if path.is_file() and (rel in keep or path.suffix in HEADER_SUFFIXES):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, out / rel)
    from torch.utils.hipify import hipify_python

    quiet = io.StringIO()  # it prints a line per run even when asked not to
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        result = hipify_python.hipify(
            project_directory=str(out),
            output_directory=str(out),
            includes=[str(out / "*")],
            header_include_dirs=[str(out)],
            is_pytorch_extension=True,
            show_detailed=False,
            show_progress=False,
        )
    return [_hipified_path(result, out / s.path) for s in sources]


def _hipified_path(result: dict, source: Path) -> Path:
    entry = result.get(str(source))
    hipified = getattr(entry, "hipified_path", None)
    return Path(hipified) if hipified else source  # a file with nothing to translate stays as it is
