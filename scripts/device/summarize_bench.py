"""One line of the headline numbers of a `pagoda bench` result file (throughput, latency or serve)."""

from __future__ import annotations

import json
import sys

KEYS = ("requests_per_s", "output_tokens_per_s", "tokens_per_s", "request_throughput", "output_throughput",
        "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "completed", "failed")


def flatten(data, prefix: str = "") -> dict:
    out = {}
    for key, value in (data.items() if isinstance(data, dict) else []):
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "_"))
        elif isinstance(value, (int, float)):
            out[name] = value
    return out


def main(path: str) -> str:
    data = json.load(open(path))
    flat = flatten(data.get("summary", data))
    parts = [f"{name}={value:.4g}" for key in KEYS for name, value in flat.items()
             if name == key or name.endswith("_" + key) and not name.startswith("roofline")]
    for step in data.get("steps", []):  # latency results
        parts.append(f"b{step['batch']}={step['step_ms']:.2f}ms({step['ratio_to_floor']:.2f}x floor)")
    return " ".join(parts)


if __name__ == "__main__":
    print(main(sys.argv[1]))
