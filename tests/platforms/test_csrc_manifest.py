"""csrc/manifest.txt: what both GPU platform plugins compile, and the torch-free kernel layer."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pagoda.platforms.csrc import CsrcSource, read_manifest

CSRC = Path(__file__).resolve().parents[2] / "csrc"
TORCH_INCLUDE = re.compile(r'#include\s*[<"](torch/|ATen/|c10/|pybind11/|Python\.h)')
LOCAL_INCLUDE = re.compile(r'#include\s*"([^"]+)"')


def test_every_listed_source_exists_and_every_source_is_listed() -> None:
    listed = {s.path for s in read_manifest(CSRC)}
    on_disk = {p.relative_to(CSRC).as_posix() for p in CSRC.rglob("*") if p.suffix in (".cu", ".cpp")}
    assert listed == on_disk, "add new sources to csrc/manifest.txt (one line each)"


def _included(path: Path, seen: set[Path]) -> set[Path]:
    """``path`` and every local header it includes, transitively."""
    if path in seen:
        return seen
    seen.add(path)
    for name in LOCAL_INCLUDE.findall(path.read_text()):
        _included((path.parent / name).resolve(), seen)
    return seen


def test_kernel_layer_includes_no_torch_header() -> None:
    kernels = [CSRC / s.path for s in read_manifest(CSRC) if s.kernel_layer]
    assert kernels, "the manifest lists no kernels/ sources"
    for source in kernels:
        for path in _included(source.resolve(), set()):
            hit = TORCH_INCLUDE.search(path.read_text())
            assert hit is None, f"{source.name} reaches a torch header through {path.name}: {hit.group(0)}"


def test_manifest_lines_and_errors(tmp_path: Path) -> None:
    (tmp_path / "manifest.txt").write_text(
        "# comment\n\nkernels/a.cu\nattention/fa.cu   nvidia_only: wgmma and TMA  # sm_90a\nbind.cpp\n"
    )
    assert read_manifest(tmp_path) == [
        CsrcSource("kernels/a.cu"), CsrcSource("attention/fa.cu", "wgmma and TMA"), CsrcSource("bind.cpp")]
    fa = read_manifest(tmp_path)[1]
    assert [fa.matches(n) for n in ("attention", "attention/", "fa", "attention/fa.cu", "att", "a")] == [
        True, True, True, True, False, False]
    for bad, message in [("x.cu nvidia", "expected '<path> \\[nvidia_only: <why>\\]'"),
                         ("x.cu nvidia_only:", "needs a reason"),
                         ("kernels/x.cu\nx.cu", "share the file name 'x'")]:
        (tmp_path / "manifest.txt").write_text(bad + "\n")
        with pytest.raises(ValueError, match=message):
            read_manifest(tmp_path)
