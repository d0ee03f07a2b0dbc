#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: both ranks' traces of the 8B's batch-1 decode
# at TP=2 (LLM.start_profile, every rank), with each rank's wait in the LL sums after the o and down
# GEMVs (scripts/device/rank_waits.py). Session 26 traced rank 0 only: its sums ended 5-6 us after its
# GEMVs even when the GEMV had pushed everything, so rank 0 waits for rank 1; this shows by how much each
# rank leads, sum by sum; then one TP=1 / TP=2 latency pair on the same machine. About 4 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz (the traces and the tables)
#   bash scripts/device/rank_waits.sh
source scripts/device/begin_cuda.sh rank_waits
timeout 240 python3 scripts/device/rank_waits.py "$M8" --out "$R" > "$R/rank_waits.txt" 2>&1
echo "rank_waits: exit $?" | tee -a "$OUT/summary.txt"
# each rank: its name, the table's first 8 rows, its sums' waits
awk '/^rank/ {n = 10} n > 0 {print; n--; next} /^sums after/' "$R/rank_waits.txt" | tee -a "$OUT/summary.txt"
bench_latency tp1 "$M8" 1 "" | tee -a "$OUT/summary.txt"
bench_latency tp2 "$M8" 2 "" | tee -a "$OUT/summary.txt"
pack_results
