"""The layer order of core/pagoda (pyproject.toml's [tool.importlinter], docs/architecture.md) holds:
import-linter passes on the tree, fails naming the import when a lower layer imports a higher one
(even inside a function), and the model runner imports no step feature."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
STEP_FEATURES = ("pagoda.guided", "pagoda.pooling", "pagoda.spec_decode", "pagoda.beam")


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` with the project's contracts, the ``pagoda`` package taken from ``root``."""
    if LINT is None:
        pytest.fail("lint-imports is missing: pip install import-linter (README's test command installs it)")
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([LINT, "--no-cache", str(REPO / "pyproject.toml")], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)


def test_the_core_keeps_its_layers():
    proc = lint(REPO / "core")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 1 kept, 0 broken." in proc.stdout


def test_an_upward_import_inside_a_function_breaks_the_contract(tmp_path):
    shutil.copytree(REPO / "core" / "pagoda", tmp_path / "pagoda", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "pagoda" / "interfaces" / "base.py", "a") as f:
        f.write("\n\ndef _upward():\n    from pagoda.server import app  # noqa: F401\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    assert "pagoda.interfaces is not allowed to import pagoda.server" in proc.stdout, proc.stdout
    assert "pagoda.interfaces.base -> pagoda.server.app" in proc.stdout, proc.stdout


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, wherever the import statement is (functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


@pytest.mark.parametrize("module", ["model_runner.py", "batch.py", "graphs.py", "features.py", "shard.py"])
def test_the_runner_imports_no_step_feature(module):
    """Step features reach the runner through pagoda.runner.features, assembled by pagoda.executor."""
    imports = imported_modules(REPO / "core" / "pagoda" / "runner" / module)
    assert not [m for m in imports if m.startswith(STEP_FEATURES)], sorted(imports)
