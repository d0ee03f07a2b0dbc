"""The device driver's bookkeeping (scripts/device/run.sh): each step's record, its one-line headline,
and a suite's results.json.

    collect.py record WORK NAME EXIT SECONDS -- CMD...   append a step to WORK/steps.jsonl
    collect.py line FILE                                  the headline of one result (JSON or pytest's junit XML)
    collect.py results WORK SUITE OUT_JSON                write the suite's results.json; print one line a step

results.json: {"suite", "env": {key: value of env.txt}, "steps": [{"name", "cmd", "exit", "seconds",
"headline", "result"}]}; ``result`` is the step's own JSON (WORK/NAME.json) or its pytest counts (WORK/NAME.xml).
"""

from __future__ import annotations

import json
import math
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

KEYS = ("requests_per_s", "output_tokens_per_s", "request_throughput", "output_throughput", "p50_ttft_ms",
        "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "completed", "failed",
        "ratio_guided_over_unguided", "mean_acceptance_length", "ratio_evicted_p50_ttft")


def flatten(data: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in data.items() if isinstance(data, dict) else ():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}_"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out


def pytest_counts(path: Path) -> dict[str, Any]:
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    counts["failed"] = [f"{case.get('classname')}::{case.get('name')}" for case in root.iter("testcase")
                        if case.find("failure") is not None or case.find("error") is not None]
    return counts


def kernel_headline(data: dict) -> str:
    """Rows, and per implementation the geometric mean of its ratio to the peer."""
    ratios: dict[str, list[float]] = {}
    for row in data["rows"]:
        for impl, ratio in row.get("vs_peer", {}).items():
            ratios.setdefault(f"{impl}/{row['peer']}", []).append(ratio)
    means = [f"{k} x{math.exp(sum(map(math.log, v)) / len(v)):.2f}" for k, v in ratios.items()]
    return f"{len(data['rows'])} rows" + (f"; geomean {', '.join(means)}" if means else "")


def headline(result: Any) -> str:
    if not isinstance(result, dict):
        return ""
    if "tests" in result and "passed" in result:
        failed = f" ({', '.join(result['failed'][:5])})" if result["failed"] else ""
        return (f"{result['passed']} passed, {result['failures'] + result['errors']} failed, "
                f"{result['skipped']} skipped{failed}")
    if result.get("schema") == 1 and "rows" in result:
        return kernel_headline(result)
    if "measurements" in result and "rows" in result:  # benchmarks/peers
        return f"{len(result['rows'])} side-by-side rows"
    flat = flatten(result.get("summary", result))
    parts = [f"{name}={value:.4g}" for key in KEYS for name, value in flat.items()
             if (name == key or name.endswith("_" + key)) and not name.startswith("roofline")]
    for step in result.get("steps", []):  # pagoda bench latency
        if isinstance(step, dict) and "step_ms" in step:
            parts.append(f"b{step['batch']}={step['step_ms']:.2f}ms({step['ratio_to_floor']:.2f}x floor)")
    return " ".join(parts)


def load_result(work: Path, name: str) -> Any:
    if (work / f"{name}.json").is_file():
        try:
            return json.loads((work / f"{name}.json").read_text())
        except ValueError as exc:
            return {"unreadable": str(exc)}
    if (work / f"{name}.xml").is_file():
        return pytest_counts(work / f"{name}.xml")
    return None


def last_line(log: Path) -> str:
    """A failed step's reason: the last line of its log."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    return lines[-1][:200] if lines else ""


def read_env(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    lines = (line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in lines}


def results(work: Path, suite: str, out: Path) -> int:
    """Write ``out``; 1 if a step failed (a non-zero exit; a step skipped for time is not a failure)."""
    steps = []
    records = (work / "steps.jsonl").read_text().splitlines() if (work / "steps.jsonl").is_file() else []
    for record in map(json.loads, records):
        result = load_result(work, record["name"])
        line = headline(result) or (last_line(work / f"{record['name']}.log") if record["exit"] != 0 else "")
        steps.append({**record, "headline": line, "result": result})
    out.write_text(json.dumps({"suite": suite, "env": read_env(out.parent / "env.txt"), "steps": steps}, indent=1) + "\n")
    for step in steps:
        status = "skipped (time budget)" if step["exit"] == "skipped" else f"exit {step['exit']}, {step['seconds']} s"
        print(f"{suite} {step['name']}: {status}  {step['headline']}".rstrip())
    return int(any(step["exit"] not in (0, "skipped") for step in steps))


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "record":
        work, name, code, seconds, cmd = Path(args[0]), args[1], args[2], args[3], args[5:]
        record = {"name": name, "cmd": cmd, "exit": int(code) if code.lstrip("-").isdigit() else code,
                  "seconds": int(seconds)}
        with open(work / "steps.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
    elif command == "line":
        path = Path(args[0])
        print(headline(load_result(path.parent, path.stem)))
    elif command == "results":
        return results(Path(args[0]), args[1], Path(args[2]))
    else:
        print(f"collect.py: unknown command {command!r}: record, line or results", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
