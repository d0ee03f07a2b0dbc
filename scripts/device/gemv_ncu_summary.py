"""Summarise Nsight Compute's CSV details page (scripts/device/gemv_ncu.sh): one line per GEMV launch with the
metrics below, labelled from gemv_ncu.py's "launch INDEX: ..." lines (ncu's IDs count the profiled launches).

    python3 scripts/device/gemv_ncu_summary.py ncu.csv launches.txt
"""

from __future__ import annotations

import csv
import re
import sys

WANTED = ("Duration", "DRAM Throughput", "Memory Throughput", "Achieved Occupancy", "Theoretical Occupancy",
          "Registers Per Thread", "Block Limit Registers", "Waves Per SM", "Warp Cycles Per Issued Instruction",
          "L2 Hit Rate")


def main(csv_path: str, launches_path: str) -> None:
    labels = dict(re.findall(r"^launch (\d+): (.+)$", open(launches_path).read(), flags=re.M))
    rows = [line for line in open(csv_path) if line.startswith('"')]  # the app's own prints are mixed in
    metrics: dict[str, dict[str, str]] = {}
    for row in csv.DictReader(rows):
        metrics.setdefault(row["ID"], {})[row["Metric Name"]] = f"{row['Metric Value']} {row['Metric Unit']}".strip()
    if not metrics:
        print("no launches in the CSV")
        return
    first = next(iter(metrics.values()))
    print("metrics read:", ", ".join(sorted(first)))
    for launch, values in metrics.items():
        shown = " | ".join(f"{name} {values[name]}" for name in WANTED if name in values)
        print(f"{labels.get(launch, 'launch ' + launch)}: {shown}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
