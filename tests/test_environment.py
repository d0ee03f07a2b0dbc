"""Every ``PAGODA_*`` variable is read through ``pagoda.envs`` and listed in docs/environment.md, and the
table lists nothing else; a bad value names the variable, the value and what it takes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pagoda import envs

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / "core" / "pagoda" / "envs.py"
TABLE = ROOT / "docs" / "environment.md"
NAME = re.compile(r"PAGODA_[A-Z0-9_]+")

pytestmark = pytest.mark.skipif(not TABLE.is_file(), reason="needs the repository's docs/ (a checkout)")


def code_files() -> list[Path]:
    """The Python of the core and the plugins (packages, setup.py); not their tests, which may set a
    variable for a process they start."""
    paths = [*ROOT.glob("core/pagoda/**/*.py"), *ROOT.glob("plugins/*/**/*.py")]
    return sorted(p for p in paths if not {"tests", "build"} & set(p.relative_to(ROOT).parts))


def variable_names(path: Path) -> set[str]:
    """String constants that are a variable's whole name (what a lookup in os.environ takes)."""
    tree = ast.parse(path.read_text(), str(path))
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value)}


def documented() -> dict[str, str]:
    """Name -> the Default column, for each row of the table."""
    rows = re.findall(r"^\| `(PAGODA_[A-Z0-9_]+)` \| ([^|]*) \|", TABLE.read_text(), re.MULTILINE)
    return {name: default.strip() for name, default in rows}


def test_only_pagoda_envs_names_a_variable() -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(names) for p in code_files()
                 if p != ENVS and (names := variable_names(p))}
    assert not offenders, f"read these through pagoda.envs (and list them in {TABLE.name}): {offenders}"


def test_the_kernels_read_no_environment() -> None:
    """C++ kernels take their settings from Python (arguments, build defines), never from getenv."""
    readers = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "csrc").rglob("*"))
               if p.is_file() and "getenv" in p.read_text(errors="ignore")]
    assert not readers


def test_the_table_lists_exactly_the_variables_read() -> None:
    declared = {var.name: var for var in envs.VARIABLES}
    assert len(declared) == len(envs.VARIABLES), "a variable declared twice"
    assert variable_names(ENVS) == set(declared), "a name in pagoda.envs missing from envs.VARIABLES"
    table = documented()
    assert set(table) == set(declared), (f"in the code, not the table: {sorted(set(declared) - set(table))}; "
                                         f"in the table, not the code: {sorted(set(table) - set(declared))}")
    for name, var in declared.items():
        shown = table[name]
        assert shown.startswith(f"`{var.default}`") if var.default else shown.startswith("none"), (name, shown)


def test_each_variable_is_read_outside_pagoda_envs() -> None:
    """A variable nothing reads any more goes from envs and the table."""
    code = "\n".join(p.read_text() for p in code_files() if p != ENVS)
    attributes = {attr for attr, value in vars(envs).items() if isinstance(value, envs.Variable)}
    assert {getattr(envs, attr) for attr in attributes} == set(envs.VARIABLES)
    unread = sorted(attr for attr in attributes if not re.search(rf"\benvs\.{attr}\b", code))
    assert not unread, f"declared in pagoda.envs but read nowhere: {unread}"


def test_values_and_defaults(monkeypatch) -> None:
    for var in envs.VARIABLES:
        monkeypatch.delenv(var.name, raising=False)
    assert envs.DIST_TIMEOUT_S.get() == 600.0 and envs.CUDA_KERNELS.get() and not envs.CUDA_BUILD_VERBOSE.get()
    assert envs.CUDA_BUILD.get() == "auto" and envs.TRACE_DIR.get() is None
    monkeypatch.setenv("PAGODA_TRACE_DIR", "")  # empty: unset
    assert envs.TRACE_DIR.get() is None
    for value, on in (("0", False), ("off", False), ("False", False), ("1", True), ("yes", True), ("ON", True)):
        monkeypatch.setenv("PAGODA_CUDA_KERNELS", value)
        assert envs.CUDA_KERNELS.get() is on
    monkeypatch.setenv("PAGODA_DIST_TIMEOUT_S", "1.5")
    assert envs.DIST_TIMEOUT_S.get() == 1.5
    monkeypatch.setenv("PAGODA_ROCM_BUILD", "1")
    assert envs.ROCM_BUILD.get() == "1"
    monkeypatch.setenv("PAGODA_HOST_IP", "10.0.0.7")
    assert envs.HOST_IP.get() == "10.0.0.7"


@pytest.mark.parametrize("var,value,allowed", [
    (envs.DIST_TIMEOUT_S, "ten", "a positive number of seconds"),
    (envs.DIST_TIMEOUT_S, "-5", "a positive number of seconds"),
    (envs.DIST_TIMEOUT_S, "nan", "a positive number of seconds"),
    (envs.CUDA_KERNELS, "maybe", "1 or 0"),
    (envs.ROCM_BUILD_VERBOSE, "2", "1 or 0"),
    (envs.CUDA_BUILD, "always", "one of auto, 0, 1"),
])
def test_a_bad_value_names_the_variable_the_value_and_what_it_takes(monkeypatch, var, value, allowed) -> None:
    monkeypatch.setenv(var.name, value)
    with pytest.raises(envs.EnvVarError, match=re.escape(f"{var.name}={value!r}: expected {allowed}")) as caught:
        var.get()
    assert isinstance(caught.value, ValueError)
