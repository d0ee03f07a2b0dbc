"""`pagoda serve` and `pagoda router` as subprocesses for the disaggregated-prefill tests."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

STARTUP_S = 240  # two processes import torch per server; CI machines are small


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(*args: str, url: str | None = None):
    """``pagoda ARGS...`` until the block ends; yields its URL (read from its log, or ``url``) and its log lines."""
    proc = subprocess.Popen([sys.executable, "-m", "pagoda.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    log: list[str] = []
    try:
        yield _wait(proc, log, url), log
    finally:
        proc.terminate()
        try:
            log.append(proc.communicate(timeout=60)[0])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _wait(proc: subprocess.Popen, log: list[str], url: str | None) -> str:
    deadline = time.monotonic() + STARTUP_S
    for line in proc.stdout:
        log.append(line)
        match = re.search(r"Serving \S+ at (http://\S+)/v1", line)
        if match:
            return match.group(1)
        if url is not None and "Uvicorn running" in line:
            break
        if time.monotonic() > deadline:
            pytest.fail("the server did not start:\n" + "".join(log))
    if url is None:
        pytest.fail("the server exited early:\n" + "".join(log))
    while httpx.get(url + "/health", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "".join(log)
        time.sleep(0.2)
    return url


def counters(url: str) -> dict[str, float]:
    """A server's kv_connector counters from /metrics."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^pagoda:(kv_connector_\w+)\{[^}]*\} (\S+)$", text, re.M)}
