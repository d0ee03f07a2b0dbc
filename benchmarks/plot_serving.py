"""Chart of the serving-core results (docs/img/serving_h100.png) from one GPU run:
benchmarks/results/h100_2026-11-23_serving_run2/ (offline and served on one machine).

    python benchmarks/plot_serving.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "h100_2026-11-23_serving_run2"
BEFORE = {"served": 23.6, "ttft_ms": (51, 1000, 1800)}  # 2026-11-22, one process (DESIGN.md figures)


def load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def main() -> None:
    offline = lambda n: load(n)["pagoda"]["requests_per_s"]  # noqa: E731
    bars = {
        "served, before\n(one process)": BEFORE["served"],
        "served\n1 API server": load("serve_1api_rate_inf")["request_throughput"],
        "served\n2 API servers": load("serve_2api_rate_inf")["request_throughput"],
        "offline\nserial steps": offline("offline_256x256_serial"),
        "offline\noverlapped": offline("offline_256x256"),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar(list(bars), list(bars.values()), color=["#bbb", "#6a9fd4", "#2b6cb0", "#9ccc9c", "#2f855a"])
    for i, v in enumerate(bars.values()):
        left.text(i, v + 0.5, f"{v:.1f}", ha="center")
    left.tick_params(axis="x", labelsize=8)
    left.set_ylabel("requests/s")
    left.set_title("Llama-3.1-8B (dummy bf16), H100, 1000 x 256/256")
    after = load("serve_2api_rate_8")
    now = [after[f"p{q}_ttft_ms"] for q in (50, 90, 99)]
    x = range(3)
    right.bar([i - 0.2 for i in x], BEFORE["ttft_ms"], width=0.4, label="before (one process)", color="#bbb")
    right.bar([i + 0.2 for i in x], now, width=0.4, label="engine core process, overlap", color="#2b6cb0")
    right.set_xticks(list(x), ["p50", "p90", "p99"])
    right.set_yscale("log")
    right.set_ylabel("TTFT ms (log)")
    right.set_title("8 requests/s, 256/256: time to first token")
    right.legend()
    fig.tight_layout()
    out = ROOT / "docs" / "img" / "serving_h100.png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
