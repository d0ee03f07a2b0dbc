"""Drive a command on a pseudo-terminal (the `pty` module): read until a marker, type lines, press Ctrl-C."""

from __future__ import annotations

import os
import pty
import select
import signal
import time

from conftest import cli_env


class PtySession:
    """A child process whose stdin/stdout/stderr are a terminal; output is read as bytes."""

    def __init__(self, argv: list[str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: exec at once, never return into pytest
            try:
                os.execvpe(argv[0], argv, cli_env())
            finally:
                os._exit(127)
        self.buffer = b""

    def read_until(self, marker: bytes, timeout: float = 60) -> bytes:
        """Everything up to and including ``marker``; raises TimeoutError with what was read."""
        deadline = time.monotonic() + timeout
        while marker not in self.buffer:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"no {marker!r} in {self.buffer[-2000:]!r}")
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # the child closed the terminal
                data = b""
            if not data:
                raise EOFError(f"the child exited before {marker!r}: {self.buffer[-2000:]!r}")
            self.buffer += data
        end = self.buffer.index(marker) + len(marker)
        out, self.buffer = self.buffer[:end], self.buffer[end:]
        return out

    def send(self, data: bytes) -> None:
        os.write(self.fd, data)

    def wait(self, timeout: float = 30) -> int:
        """The child's exit status (killing it after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 65536)  # drain, so the child never blocks on a full terminal
            except OSError:
                time.sleep(0.02)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise TimeoutError("the child did not exit")
