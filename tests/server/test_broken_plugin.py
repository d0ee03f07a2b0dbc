"""Fault drill: an installed plugin whose module raises at import. `pagoda serve` starts and serves
anyway, and `pagoda plugins` lists the plugin as failed, with its error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from torch.utils.cpp_extension import get_default_build_root

from serve_process import start_serve, stop

ERROR = "pagoda_drill_broken cannot start: its kernels were built for another torch"


def install_broken_plugin(site: Path) -> dict[str, str]:
    """A distribution ``pagoda-drill-broken`` (metadata and entry point in ``site``, as pip leaves
    them) whose plugin module raises at import; returns the environment that sees it."""
    (site / "pagoda_drill_broken.py").write_text(f"raise RuntimeError({ERROR!r})\n")
    dist = site / "pagoda_drill_broken-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pagoda-drill-broken\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[pagoda.plugins]\ndrill-broken = pagoda_drill_broken\n")
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    # a private cache folder: nothing left behind; but the CPU kernels this torch already built are reused (a
    # private build of them is a minute of compiling on two cores)
    return {"PYTHONPATH": path, "XDG_CACHE_HOME": str(site / "cache"), "TORCH_EXTENSIONS_DIR": get_default_build_root()}


def test_serve_starts_and_serves_and_plugins_shows_the_error(tiny_chat_model, tmp_path):
    env = install_broken_plugin(tmp_path)
    proc, url, log = start_serve(tiny_chat_model, tmp_path, env=env)
    try:
        assert any("Pagoda plugin 'drill-broken' (pagoda-drill-broken) skipped: import failed" in line
                   for line in log), "".join(log)
        response = httpx.post(url + "/v1/completions", timeout=60,
                              json={"model": "tiny", "prompt": "t1 t2", "max_tokens": 3, "temperature": 0})
        assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] == 3
    finally:
        stop(proc, log)
    listed = subprocess.run([sys.executable, "-m", "pagoda.cli.main", "plugins", "--json"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, **env})
    assert listed.returncode == 0, listed.stderr
    plugin = {p["name"]: p for p in json.loads(listed.stdout)}["drill-broken"]
    assert (plugin["status"], plugin["distribution"], plugin["version"]) == ("failed", "pagoda-drill-broken", "0.1.0")
    assert f"import failed: RuntimeError: {ERROR}" in plugin["errors"][0]
