"""Test folders have no __init__.py, so pytest imports each file by its bare name: two files of one name in
different folders collide ("import file mismatch"), or one silently shadows the other as a helper import.
The same holds for the benchmark folders some tests put on sys.path."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ("conftest.py", "__init__.py")  # pytest handles these per folder


def module_files() -> list[Path]:
    folders = [ROOT / "tests", *sorted(ROOT.glob("plugins/*/tests")), ROOT / "benchmarks" / "peers"]
    return [f for folder in folders for f in folder.rglob("*.py")
            if f.name not in SHARED and not (f.parent / "__init__.py").exists()]  # a package's modules are qualified


def test_every_test_and_helper_module_name_is_unique() -> None:
    where = defaultdict(list)
    for f in module_files():
        where[f.stem].append(str(f.relative_to(ROOT)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
