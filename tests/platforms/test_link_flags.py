"""The extensions link the process's shared C++ runtime (``SHARED_CXX_RUNTIME``) even where the compiler
links libstdc++ statically by default, as the GPU machine's g++ did (a private copy of the streams in
``_C.so`` crashed every failed check that formats an integer). ``-static-libstdc++`` stands in for such a
compiler: without the flags the library carries its own libstdc++, with them it needs libstdc++.so.6."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pagoda.platforms.csrc import SHARED_CXX_RUNTIME

SOURCE = '#include <sstream>\n#include <string>\nstd::string message(long n) { std::ostringstream s; s << "not " << n; return s.str(); }\n'


def needed(library: Path) -> list[str]:
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]


@pytest.mark.parametrize("shared_runtime", [False, True])
def test_a_statically_linking_compiler_still_yields_the_shared_runtime(tmp_path: Path, shared_runtime: bool) -> None:
    cxx, readelf = shutil.which("g++"), shutil.which("readelf")
    if not (cxx and readelf):
        pytest.skip("needs g++ and readelf")
    (tmp_path / "m.cpp").write_text(SOURCE)
    out = tmp_path / "libm.so"
    flags = SHARED_CXX_RUNTIME if shared_runtime else []
    subprocess.run([cxx, "-shared", "-fPIC", "-static-libstdc++", str(tmp_path / "m.cpp"), "-o", str(out), *flags],
                   check=True, capture_output=True, text=True)
    assert ("libstdc++.so.6" in needed(out)) is shared_runtime, needed(out)
