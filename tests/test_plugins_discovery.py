"""Plugin discovery end to end: the core and the fake plugins of tests/plugins/ pip-installed into
one throwaway venv (``--system-site-packages`` for torch & co.; ``--no-deps --no-build-isolation
--no-index``, so offline), then ``pagoda plugins`` and fresh PluginManagers run in that venv."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from pagoda.cli.scaffold import placeholders, render, write_example, write_package
from pagoda.testing import skip_unless_ci

REPO = Path(__file__).resolve().parents[1]
FAKES = ("fake_attention", "fake_platform", "broken_import", "broken_hook")
FIRST_PARTY = tuple(sorted(p.parent.name for p in (REPO / "plugins").glob("*/pyproject.toml")))  # platform_cuda, ...
COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache")
PAGODA_ENTRY = re.compile(r"(__editable__[._]+)?pagoda", re.IGNORECASE)  # its packages, dist-infos, editable hooks


class Env:
    """A venv with its own pagoda install, and helpers running commands inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "venv" / "bin"
        self.src = root / "src"
        self.environ = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PAGODA_PLUGINS", "PAGODA_DISABLE_PLUGINS", "FAKE_PLATFORM_AVAILABLE")
        }
        self.environ.update(XDG_CACHE_HOME=str(root / "cache"), PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1")

    def run(
        self, *args: str | Path, env: dict[str, str] | None = None, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            cwd=cwd or self.root,
            env={**self.environ, **(env or {})},
            timeout=300,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"{' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def pip(self, *args: str | Path) -> None:
        self.run(self.bin / "python", "-m", "pip", *args)

    def install(self, *sources: Path) -> None:
        """Copy each project out of the repo (no build litter there), then pip-install them at once."""
        copies = []
        for source in sources:
            copy = self.src / source.relative_to(REPO)
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source, copy, ignore=COPY_IGNORE)
            copies.append(copy)
        self.pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir", "-q", *copies)

    def python(self, code: str, env: dict[str, str] | None = None) -> str:
        return self.run(self.bin / "python", "-c", code, env=env).stdout

    def plugins_json(self, *flags: str, env: dict[str, str] | None = None) -> dict[str, dict]:
        out = self.run(self.bin / "pagoda", "plugins", "--json", *flags, env=env).stdout
        return {p["name"]: p for p in json.loads(out)}


def _copy_core(dest: Path) -> Path:
    dest.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "core", dest / "core", ignore=COPY_IGNORE)
    return dest


def _see_outer_packages(root: Path, venv_dir: Path) -> None:
    """Make this interpreter's packages (torch, pip, ...) visible in the new venv, after its own, all
    but its pagoda distributions: the venv must find only the pagoda and plugins installed into it.

    ``system_site_packages`` only reaches the base interpreter's site-packages; when the tests
    themselves run in a venv (as in CI, where README's command installs the first-party plugins
    too), torch lives in that venv's site-packages instead. Their entries are linked into one folder,
    without pagoda's, that the venv's ``.pth`` file adds to its path.
    """
    outer = root / "outer-site-packages"
    outer.mkdir()
    for folder in (Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")):
        for entry in folder.iterdir() if folder.is_dir() else ():
            if not PAGODA_ENTRY.match(entry.name) and not (outer / entry.name).exists():
                (outer / entry.name).symlink_to(entry)
    own = next((venv_dir / "lib").glob("python*/site-packages"))
    (own / "_outer_site_packages.pth").write_text(f"{outer}\n")


@pytest.fixture(scope="session")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    e = Env(tmp_path_factory.mktemp("plugin-venv"))
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(e.root / "venv")
    _see_outer_packages(e.root, e.root / "venv")
    core = _copy_core(e.src / "pagoda")
    e.pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir", "-q", core)
    e.install(*(REPO / "tests" / "plugins" / name for name in FAKES))
    return e


@pytest.fixture(scope="session")
def first_party(env: Env) -> Env:
    env.install(*(REPO / "plugins" / name for name in FIRST_PARTY))
    return env


def test_venv_runs_its_own_pagoda_with_the_template(env: Env) -> None:
    out = env.python(
        "import pagoda, importlib.resources as r; print(pagoda.__file__); "
        "print((r.files('pagoda.cli') / 'template' / 'common' / 'pyproject.toml.tmpl').is_file())"
    ).split()
    assert Path(out[0]).is_relative_to(env.root / "venv"), f"the global editable pagoda won: {out[0]}"
    assert out[1] == "True", "the plugin template is missing from the installed package data"


def test_plugins_lists_good_and_broken_plugins(env: Env) -> None:
    plugins = env.plugins_json()
    assert sorted(plugins) == ["broken-hook", "broken-import", "builtin", "fake-attention", "fake-platform"], (
        "the venv must see only the plugins installed into it"
    )
    attention = plugins["fake-attention"]
    assert (attention["status"], attention["distribution"], attention["version"]) == (
        "loaded",
        "pagoda-fake-attention",
        "0.1.0",
    )
    assert (attention["module"], attention["registers"]) == (
        "pagoda_fake_attention.plugin",
        {"attention": ["fake-attn"]},
    )
    assert plugins["fake-platform"]["registers"] == {"platform": ["fake-platform"]}
    broken_import = plugins["broken-import"]
    assert broken_import["status"] == "failed"
    assert "ImportError: pagoda_broken_import needs the library 'libfake'" in broken_import["errors"][0]
    broken_hook = plugins["broken-hook"]
    assert (broken_hook["status"], broken_hook["registers"]) == ("failed", {})
    assert "RuntimeError: broken_hook failed halfway" in broken_hook["errors"][0]
    assert not any("half-registered" in names for p in plugins.values() for names in p["registers"].values())
    table = env.run(env.bin / "pagoda", "plugins").stdout
    row = next(line for line in table.splitlines() if line.startswith("fake-attention "))
    assert row.split() == ["fake-attention", "pagoda-fake-attention", "0.1.0", "loaded", "attention:", "fake-attn"]
    errors = table.split("Errors (these plugins register nothing):")[1]
    assert "broken-import (pagoda-broken-import): import failed" in errors
    assert "broken-hook (pagoda-broken-hook): register_attention_backends raised" in errors


def test_block_and_allow_switches(env: Env) -> None:
    blocked = env.plugins_json("--disable-plugins", "fake-attention")
    assert (blocked["fake-attention"]["status"], blocked["fake-attention"]["registers"]) == ("disabled", {})
    assert blocked["fake-platform"]["status"] == "loaded"
    by_env = env.plugins_json(env={"PAGODA_DISABLE_PLUGINS": "pagoda-fake-platform"})  # a distribution name works too
    assert (by_env["fake-platform"]["status"], by_env["fake-platform"]["registers"]) == ("disabled", {})
    allowed = env.plugins_json("--plugins", "fake-attention")
    assert {n for n, p in allowed.items() if p["status"] == "loaded"} == {"builtin", "fake-attention"}
    assert {p["status"] for n, p in allowed.items() if n not in ("builtin", "fake-attention")} == {"disabled"}


def test_first_party_plugins_install_and_are_discovered(first_party: Env) -> None:
    plugins = first_party.plugins_json()
    for folder in FIRST_PARTY:
        info = plugins[folder.replace("_", "-")]
        assert info["status"] == "loaded", info
        assert (info["distribution"], info["version"]) == ("pagoda-" + folder.replace("_", "-"), "0.1.0")
        assert info["module"] == f"pagoda_{folder}.plugin"
        registers = {"attention_triton": {"attention": ["triton"]}, "attention_flash": {"attention": ["flash"]},
                     "attention_cpu": {"attention": ["cpu"]},
                     "platform_cpu": {"platform": ["cpu-native"]}, "platform_cuda": {"platform": ["cuda"]},
                     "platform_rocm": {"platform": ["rocm"]},
                     "quant_awq": {"quantization": ["awq"]}, "quant_fp8": {"quantization": ["fp8", "int8"]},
                     "quant_gptq": {"quantization": ["gptq", "wna16"]}}.get(folder, {})
        assert info["registers"] == registers, f"{folder} registers {info['registers']}, expected {registers}"
    files = first_party.python(
        "import importlib; " + "; ".join(f"print(importlib.import_module('pagoda_{f}.plugin').__file__)" for f in FIRST_PARTY)
    ).split()
    for path in files:  # each plugin loads from its copy installed in this venv (their own tests run in README's command)
        assert Path(path).is_relative_to(first_party.root / "venv"), f"a plugin outside the venv was loaded: {path}"


@pytest.mark.parametrize("folder", FIRST_PARTY)
def test_first_party_plugins_are_installed_for_their_tests(folder: str) -> None:
    """README's test command installs each plugin of plugins/ (editable) where the suite runs, so that
    plugins/*/tests, collected beside the core's tests, test it; without it they skip, and under CI fail here."""
    distribution = "pagoda-" + folder.replace("_", "-")
    readme = (REPO / "README.md").read_text()
    command = readme.split("<!-- test-command -->", 1)[1].split("```", 2)[1]
    assert f" -e plugins/{folder} " in command, f"README's test command must install plugins/{folder} (-e plugins/{folder})"
    try:
        md.version(distribution)
    except md.PackageNotFoundError:
        skip_unless_ci(f"{distribution} is not installed, so plugins/{folder}/tests skip: pip install -e plugins/{folder}")


SELECTION_PROBE = """
import json
from pagoda.platforms.cpu import CpuPlatform
from pagoda.plugins.manager import PluginManager

def error(fn):
    try:
        fn()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"

pm = PluginManager()
print(json.dumps({
    "flash_on_cpu": error(lambda: pm.registry("attention").select("flash", platform=CpuPlatform())),
    "disabled": error(lambda: PluginManager(block="attention-triton").registry("attention").get("triton")),
    "incompatible": error(lambda: pm.registry("platform").select("fake-platform")),
    "auto": pm.registry("attention").select("auto", platform=CpuPlatform())[0],
}))
"""


def test_selection_errors_with_installed_plugins(first_party: Env) -> None:
    out = json.loads(first_party.python(SELECTION_PROBE))
    assert out["flash_on_cpu"].startswith("IncompatibleChoiceError: Attention backend 'flash' cannot be used here: "
                                          "flash needs an NVIDIA GPU"), out["flash_on_cpu"]
    assert "plugin 'attention-triton' is disabled" in out["disabled"]
    assert out["incompatible"].startswith("IncompatibleChoiceError: Platform 'fake-platform' cannot be used here")
    assert "set FAKE_PLATFORM_AVAILABLE=1" in out["incompatible"]
    assert out["auto"] == "fake-attn"


def test_uninstalling_removes_the_backend(env: Env) -> None:
    probe = (
        "from pagoda.plugins.manager import PluginManager\n"
        "from pagoda.errors import UnknownChoiceError\n"
        "try:\n    PluginManager().registry('attention').get('fake-attn')\n"
        "except UnknownChoiceError as exc:\n    print('unknown:', exc)\n"
        "else:\n    print('found')\n"
    )
    assert env.python(probe).strip() == "found"
    env.pip("uninstall", "-y", "-q", "pagoda-fake-attention")
    try:
        out = env.python(probe)
        assert out.startswith("unknown: Unknown attention backend 'fake-attn'. Available:"), out
    finally:
        env.install(REPO / "tests" / "plugins" / "fake_attention")


def test_a_second_distribution_reusing_an_entry_point_name_fails_alone(env: Env) -> None:
    """pagoda-dup-first, then pagoda-dup-second, both name their entry point 'dup': the newcomer fails
    naming both distributions, the first keeps its method; in either install order."""
    fakes = REPO / "tests" / "plugins"
    try:
        for first, second in (("first", "second"), ("second", "first")):
            env.install(fakes / f"dup_{first}")
            env.install(fakes / f"dup_{second}")  # later: the newcomer
            listed = json.loads(env.run(env.bin / "pagoda", "plugins", "--json").stdout)
            dups = {p["distribution"]: p for p in listed if p["name"] == "dup"}  # one name, two distributions
            kept, failed = dups[f"pagoda-dup-{first}"], dups[f"pagoda-dup-{second}"]
            assert (kept["distribution"], kept["status"]) == (f"pagoda-dup-{first}", "loaded")
            assert kept["registers"] == {"quantization": [f"{first}-int8"]}
            assert (failed["status"], failed["registers"]) == ("failed", {})
            assert failed["errors"] == [
                f"entry point name 'dup' of pagoda-dup-{second} is already used by pagoda-dup-{first} (installed "
                f"earlier), which keeps it; rename the entry point in pagoda-dup-{second}'s pyproject.toml "
                '([project.entry-points."pagoda.plugins"]) or uninstall one of the two'
            ]
            env.pip("uninstall", "-y", "-q", "pagoda-dup-first", "pagoda-dup-second")
    finally:
        env.run(env.bin / "python", "-m", "pip", "uninstall", "-y", "-q", "pagoda-dup-first", "pagoda-dup-second",
                check=False)


def test_plugins_new_generates_an_installable_tested_package(env: Env) -> None:
    out = env.root / "generated"
    env.run(env.bin / "pagoda", "plugins", "new", "my-attn", "--output", out)  # the venv's packaged template
    for name, kind in (("my-plat", "platform"), ("my-quant", "quantization")):  # same code, in-process
        write_package(out / f"pagoda-{name}", placeholders(name, kind))
    env.pip(
        "install", "--no-deps", "--no-build-isolation", "--no-index", "--no-cache-dir", "-q", out / "pagoda-my-attn"
    )
    info = env.plugins_json()["my-attn"]
    assert (info["status"], info["distribution"], info["version"]) == ("loaded", "pagoda-my-attn", "0.1.0")
    assert (info["module"], info["registers"]) == ("pagoda_my_attn.plugin", {"attention": ["my-attn"]})
    dirs = [out / f"pagoda-{n}" for n in ("my-attn", "my-plat", "my-quant")]
    proc = env.run(
        env.bin / "python",
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        *(d / "tests" for d in dirs),
        env={"PYTHONPATH": os.pathsep.join(map(str, dirs))},
        cwd=out,
    )
    assert "7 passed" in proc.stdout, proc.stdout
    again = env.run(env.bin / "pagoda", "plugins", "new", "my-attn", "--output", out, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr


def test_example_is_the_rendered_template(tmp_path: Path) -> None:
    example = REPO / "examples" / "plugin-template"
    ignore = {"__pycache__", ".pytest_cache", "build"}
    actual = {
        p.relative_to(example).as_posix(): p.read_text()
        for p in example.rglob("*")
        if p.is_file() and not ignore & set(p.relative_to(example).parts) and ".egg-info" not in p.as_posix()
    }
    expected = render(placeholders(name="example", plugin="plugin-example", kind="attention"))
    regenerate = (
        "regenerate it: rm -r examples/plugin-template && python -c "
        "\"from pagoda.cli.scaffold import write_example; write_example('examples/plugin-template')\""
    )
    assert sorted(actual) == sorted(expected), regenerate
    for rel, text in expected.items():
        assert actual[rel] == text, f"examples/plugin-template/{rel} drifted from the template; {regenerate}"
    write_example(tmp_path / "ex")  # and writing it produces the same files
    assert sorted(
        p.relative_to(tmp_path / "ex").as_posix() for p in (tmp_path / "ex").rglob("*") if p.is_file()
    ) == sorted(expected)


def test_bad_plugin_names_are_refused_with_a_fix() -> None:
    with pytest.raises(ValueError, match="try 'my-attn'"):
        placeholders("My_Attn")
    with pytest.raises(ValueError, match="leave out the 'pagoda-' prefix"):
        placeholders("pagoda-x")
    with pytest.raises(ValueError, match="no template for kind 'schedular'; choose one of: attention, "):
        placeholders("x", kind="schedular")
