"""Opt-in timing traces for latency investigations: ``PAGODA_TRACE_DIR=/path`` makes the engine
core write one JSON line per step and per first token (``core.jsonl``) and each API server one
line per request when its first output reaches the HTTP handler (``api_<pid>.jsonl``). Times are
``time.monotonic()`` seconds, one clock for all processes of a machine, so the files join on
request id: arrival (API) -> received (core) -> first launched -> first token read (core) ->
handed to the HTTP handler (API). A step's line also counts the device-allocator events during it
(``Platform.allocator_counts``: cudaMalloc calls, retries after emptying the cache). Each file also
gets one line per garbage collection of its process that took at least half a millisecond, and per
full collection (``gc``: the generation)."""

from __future__ import annotations

import atexit
import gc
import time
from pathlib import Path
from typing import Callable

import msgspec

from pagoda import envs


class Trace:
    """Appends JSON lines to one file (buffered; flushed when closed or at exit)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "ab", buffering=1 << 16)  # noqa: SIM115 - lives as long as the process
        self._encode = msgspec.json.Encoder().encode
        self._gc_start: float | None = None
        gc.callbacks.append(self._on_gc)
        atexit.register(self.close)

    @classmethod
    def from_env(cls, name: str) -> "Trace | None":
        folder = envs.TRACE_DIR.get()
        return cls(Path(folder) / f"{name}.jsonl") if folder else None

    def record(self, **fields) -> None:
        self._file.write(self._encode(fields) + b"\n")

    def flush(self) -> None:
        self._file.flush()

    def _on_gc(self, phase: str, info: dict) -> None:
        """{"gc": generation, "start": t, "seconds": pause, "collected": objects} for pauses of 0.5 ms or more."""
        if phase == "start":
            self._gc_start = time.monotonic()
        elif self._gc_start is not None:
            start, self._gc_start = self._gc_start, None
            seconds = time.monotonic() - start
            if seconds >= 5e-4 or info["generation"] == 2:
                self.record(gc=info["generation"], start=start, seconds=seconds, collected=info["collected"])

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._file.close()


class CountDeltas:
    """Calls return how much each of a set of cumulative counters grew since the last call (only those
    that grew): a step's device-allocator events, from ``Platform.allocator_counts``."""

    def __init__(self, read: Callable[[], dict[str, int]]) -> None:
        self._read = read
        self._last = read()

    def __call__(self) -> dict[str, int]:
        now = self._read()
        grown = {name: value - self._last.get(name, 0) for name, value in now.items() if value != self._last.get(name, 0)}
        self._last = now
        return grown
