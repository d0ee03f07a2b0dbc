"""Run a command and report its wall time, its whole process tree's peak resident memory (sampled), and its
last stdout line that parses as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass

import psutil

SAMPLE_S = 0.1


@dataclass
class Measured:
    wall_s: float
    peak_rss_bytes: int
    result: dict | None
    returncode: int
    log: str  # stdout and stderr


def tree_rss(process: psutil.Process) -> int:
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_measured(cmd: list[str], env: dict[str, str], timeout_s: float) -> Measured:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watched, peak = psutil.Process(proc.pid), 0
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        peak = max(peak, tree_rss(watched))
        if time.perf_counter() - start > timeout_s:
            proc.kill()
            break
        time.sleep(SAMPLE_S)
    proc.wait()
    reader.join(timeout=5)
    return Measured(time.perf_counter() - start, peak, last_json(lines), proc.returncode, "".join(lines))


def last_json(lines: list[str]) -> dict | None:
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None
