"""`pagoda serve` as a real subprocess for the fault drills: started on a free port, its output kept."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

# Every process of the server (the engine core's too, which is spawned) imports this as
# sitecustomize: each engine step is slowed down so that a request is surely in flight at SIGTERM.
SLOW_STEPS = """
import time
from pagoda.engine_core import core
real_step = core.EngineCore.step
def slow_step(self):
    time.sleep(0.02)
    return real_step(self)
core.EngineCore.step = slow_step
"""


def start_serve(model: str, tmp_path: Path, *flags: str,
                env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, list[str]]:
    """``pagoda serve MODEL`` served as "tiny", with ``tmp_path`` (holding SLOW_STEPS as
    sitecustomize) first on PYTHONPATH; returns the process, its URL and its log lines so far."""
    (tmp_path / "sitecustomize.py").write_text(SLOW_STEPS)
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc = subprocess.Popen(
        [sys.executable, "-m", "pagoda.cli.main", "serve", model, "--port", "0", "--served-model-name", "tiny",
         "--block-size", "8", "--shutdown-timeout", "90", *flags],  # drains finish on a loaded CI machine
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})},
    )
    try:
        return _wait_until_serving(proc)
    except BaseException:
        proc.kill()  # never leave a server (and its engine core) behind
        proc.wait()
        raise


def _wait_until_serving(proc: subprocess.Popen) -> tuple[subprocess.Popen, str, list[str]]:
    log: list[str] = []
    deadline = time.monotonic() + 180  # two processes import torch; CI machines are small
    for line in proc.stdout:
        log.append(line)
        match = re.search(r"Serving tiny at (http://\S+)/v1", line)
        if match:
            url = match.group(1)
            break
        assert time.monotonic() < deadline, "".join(log)
    else:
        pytest.fail("the server exited early:\n" + "".join(log))
    threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True).start()  # keep the pipe drained
    while not healthy(url):
        assert time.monotonic() < deadline, "".join(log)
        time.sleep(0.05)
    return proc, url, log


def healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def stop(proc: subprocess.Popen, log: list[str]) -> None:
    """SIGTERM, and the server must exit 0; killed if it is still there after a minute."""
    if proc.poll() is None:
        proc.terminate()
    try:
        assert proc.wait(timeout=60) == 0, "".join(log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
