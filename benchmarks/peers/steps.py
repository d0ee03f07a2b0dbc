"""Running the steps of a comparison under one deadline: subprocesses with time limits, servers that
start, answer /v1/models, and stop. Each step leaves a log; a step that cannot finish in time is
recorded as skipped or timed out, never silently dropped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


class Deadline:
    """Seconds left of the run's budget; steps ask before they start."""

    def __init__(self, budget_s: float, clock=time.monotonic) -> None:
        self.clock = clock
        self.end = clock() + budget_s

    def left(self) -> float:
        return self.end - self.clock()

    def limit(self, cap_s: float) -> float:
        """The time a step may take: its cap, or what is left, whichever is smaller (>= 0)."""
        return max(0.0, min(cap_s, self.left()))


@dataclass
class StepRecord:
    name: str
    engine: str
    status: str = "pending"  # ok | failed | timeout | skipped
    seconds: float = 0.0
    log: str = ""
    result: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"name": self.name, "engine": self.engine, "status": self.status, "seconds": round(self.seconds, 1),
                "log": self.log, "result": self.result}


def run_step(record: StepRecord, cmd: list[str], env: dict, log: Path, deadline: Deadline, cap_s: float,
             min_s: float = 20.0) -> StepRecord:
    """Run cmd with its output in log, at most min(cap_s, time left); skip when less than min_s is left."""
    limit = deadline.limit(cap_s)
    record.log = str(log)
    if limit < min_s:
        record.status = "skipped"
        return record
    start = time.monotonic()
    with open(log, "ab") as out:
        out.write(("$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=limit)
            record.status = "ok" if code == 0 else "failed"
        except subprocess.TimeoutExpired:
            stop_group(proc)
            record.status = "timeout"
    record.seconds = time.monotonic() - start
    return record


def stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """SIGTERM the process group this harness started (start_new_session), then SIGKILL it."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


class Server:
    """A server subprocess (its own process group) that is ready once GET /v1/models answers."""

    def __init__(self, cmd: list[str], env: dict, port: int, log: Path) -> None:
        self.cmd, self.env, self.port, self.log = cmd, env, port, log
        self.proc: subprocess.Popen | None = None
        self.model = ""
        self.startup_s = 0.0
        self.failure = ""  # why start() returned False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float, timeout_note: str = "") -> bool:
        """Whether the server answered within ``timeout_s``; if not, ``failure`` says why (``timeout_note`` added
        where it ran out of time)."""
        start = time.monotonic()
        out = open(self.log, "ab")
        out.write(("$ " + " ".join(self.cmd) + "\n").encode())
        out.flush()
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        while time.monotonic() - start < timeout_s and self.proc.poll() is None:
            self.model = first_model(self.base_url)
            if self.model:
                self.startup_s = time.monotonic() - start
                return True
            time.sleep(2)
        code = self.proc.poll()
        self.failure = (f"exited with status {code}" if code is not None
                        else f"not ready within {timeout_s:.0f} s{timeout_note}")
        return False

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc)
            self.proc = None

    def request(self, method: str, path: str, timeout_s: float = 60.0) -> tuple[int, str]:
        """(HTTP status, body) of one request to the server; status 0 with the reason when it did not answer."""
        req = urllib.request.Request(self.base_url + path, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except OSError as exc:
            return 0, f"{type(exc).__name__}: {exc}"


def first_model(base_url: str) -> str:
    """The first model id /v1/models lists, or '' while the server is not up."""
    try:
        with urllib.request.urlopen(base_url + "/v1/models", timeout=5) as response:
            data = json.loads(response.read()).get("data") or []
            return data[0]["id"] if data else ""
    except (OSError, ValueError, KeyError):
        return ""
