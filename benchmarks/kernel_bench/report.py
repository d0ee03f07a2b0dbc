"""The one result schema of the kernel benchmarks, and its printed form.

A result file (``--out``) holds::

    {"schema": 1, "benchmark": NAME, "args": {...}, "timing": "...",
     "env": {"device", "torch", "triton", "commit", "copy_gbs", "matmul_tflops"},
     "rows": [ROW, ...], "summary": [...]}

and each ROW::

    {"case": {...},                 # what was timed (shape, tokens, batch, ...)
     "us": {IMPL: microseconds},    # every implementation timed on the case
     "peer": IMPL,                  # the reference the others are compared with (absent if none)
     "vs_peer": {IMPL: peer_us / us},   # > 1: faster than the peer
     "floor_us": F,                 # the roofline: bytes at the copy rate, FLOPs at the matmul rate
     "of_floor": {IMPL: F / us},    # 1.0: at the roofline
     ...}                           # family-specific extras (errors, plans, TFLOP/s)
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import torch

from benchmarks.kernel_bench.timing import Rates

SCHEMA = 1
ROOT = Path(__file__).resolve().parents[2]


def significant(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def make_row(case: dict[str, Any], us: dict[str, float], peer: str | None = None, floor_us: float | None = None,
             **extra: Any) -> dict[str, Any]:
    """A row of the schema; ratios are computed here, once, for every family."""
    row: dict[str, Any] = {"case": case, "us": {name: significant(t) for name, t in us.items()}}
    if peer is not None:
        if peer not in us:
            raise ValueError(f"peer {peer!r} was not timed (timed: {', '.join(us)})")
        row["peer"] = peer
        row["vs_peer"] = {name: significant(us[peer] / t) for name, t in us.items() if name != peer}
    if floor_us:
        row["floor_us"] = significant(floor_us)
        row["of_floor"] = {name: significant(floor_us / t) for name, t in us.items()}
    row.update(extra)
    return row


def by_m(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    """The rows by their case's token count ``m``, smallest first."""
    groups: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["case"]["m"], []).append(row)
    return dict(sorted(groups.items()))


def summed_us(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Each implementation timed in every one of ``rows``: its microseconds summed over them (e.g. a decoder
    layer's projections), in the first row's order."""
    return {name: sum(r["us"][name] for r in rows) for name in rows[0]["us"] if all(name in r["us"] for r in rows)}


def format_row(row: dict[str, Any]) -> str:
    """One printed line: the case, then each implementation's time, its ratio to the peer and to the floor."""
    case = " ".join(f"{k}={v}" for k, v in row["case"].items())
    cells = []
    for name, t in row["us"].items():
        notes = []
        if name in row.get("vs_peer", {}):
            notes.append(f"x{row['vs_peer'][name]:.2f} vs {row['peer']}")
        if name in row.get("of_floor", {}):
            notes.append(f"{row['of_floor'][name]:.0%} of floor")
        cells.append(f"{name} {t:9.1f} us" + (f" ({', '.join(notes)})" if notes else ""))
    return f"{case:32s} | " + " | ".join(cells)


def commit() -> str:
    """The source version: $COMMIT where set (the GPU machine has no .git), else git's HEAD (+ "-dirty")."""
    if os.environ.get("COMMIT"):
        return os.environ["COMMIT"]
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def env_info(rates: Rates) -> dict[str, Any]:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({os.cpu_count()} cores)"
    return {"device": name, "torch": torch.__version__, "triton": triton_version, "commit": commit(),
            "copy_gbs": float(f"{rates.copy_gbs:.4g}"), "matmul_tflops": float(f"{rates.matmul_tflops:.4g}")}


class Report:
    """Rows of one benchmark run, printed as they come and written as JSON (after each row: a run cut
    short by a time limit keeps what finished)."""

    def __init__(self, name: str, args: dict[str, Any], rates: Rates, timing: str, out: str | None) -> None:
        self.rates = rates
        self.out = Path(out) if out else None
        self.data: dict[str, Any] = {"schema": SCHEMA, "benchmark": name, "args": args, "timing": timing,
                                     "env": env_info(rates), "rows": [], "summary": []}
        print(f"{name} on {self.data['env']['device']}: copy {rates.copy_gbs:.0f} GB/s, matmul "
              f"{rates.matmul_tflops:.3g} TFLOP/s; {timing}", flush=True)

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["rows"]

    def add(self, row: dict[str, Any]) -> dict[str, Any]:
        self.rows.append(row)
        print(format_row(row), flush=True)
        self.write()
        return row

    def summarize(self, line: str, **values: Any) -> None:
        self.data["summary"].append({"line": line, **values})
        print(line, flush=True)
        self.write()

    def write(self) -> None:
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.out.write_text(json.dumps(self.data, indent=1) + "\n")
