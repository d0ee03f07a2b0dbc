#!/usr/bin/env bash
# On one H200 (tool `run`, kind nvidia-h200, carry [".whl"]), issue 15: why a TP=2 rank's small GEMVs (o, qkv)
# stream at 55-72% of the copy bandwidth on an H200 against 95% for gate_up. Nsight Compute (clocks left
# alone, caches flushed before each launch) reads each launch of scripts/device/gemv_ncu.py: duration, DRAM
# throughput, achieved occupancy, registers, the occupancy limiters and the warp stall reasons.
# About 3 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_ncu.sh
source scripts/device/begin_cuda.sh gemv_ncu
python3 scripts/device/gemv_ncu.py > "$R/launches.txt" 2>&1   # builds the kernels outside the profiler
timeout 400 ncu --clock-control none --kernel-name regex:dense_gemv --section SpeedOfLight --section Occupancy \
  --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --csv --page details \
  python3 scripts/device/gemv_ncu.py > "$R/ncu.csv" 2> "$R/ncu.log"
echo "ncu: exit $? ($(grep -c '"dense_gemv' "$R/ncu.csv") rows)" | tee "$OUT/summary.txt"
python3 scripts/device/gemv_ncu_summary.py "$R/ncu.csv" "$R/launches.txt" 2>&1 | tee -a "$OUT/summary.txt"
pack_results
