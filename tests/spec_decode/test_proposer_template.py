"""`pagoda plugins new NAME --kind proposer`: the generated package pip-installs, Pagoda finds its
entry point and registers the proposer, and the package's own tests pass (among them greedy
outputs unchanged by speculating with it on a tiny model)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pagoda.cli.main import main

PROBE = """
from pagoda.plugins.manager import PluginManager
manager = PluginManager()
info = manager.plugins["my-prop"]
print(info.status, info.distribution, info.module, info.registers, manager.registry("proposer").get("my-prop").__name__)
"""


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(args)}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_generated_proposer_installs_registers_and_passes_its_tests(tmp_path: Path) -> None:
    assert main(["plugins", "new", "my-prop", "--kind", "proposer", "--output", str(tmp_path)]) == 0
    package = tmp_path / "pagoda-my-prop"
    assert (package / "pagoda_my_prop" / "proposer.py").is_file()
    site = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if k not in ("PAGODA_PLUGINS", "PAGODA_DISABLE_PLUGINS")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "--no-cache-dir", "--target", str(site), str(package)], tmp_path, env)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = _run([sys.executable, "-c", PROBE], tmp_path, env).split()
    assert out[:3] == ["loaded", "pagoda-my-prop", "pagoda_my_prop.plugin"] and out[-1] == "MyPropProposer"
    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], package, env)
    assert "3 passed" in tests, tests
