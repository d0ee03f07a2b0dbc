#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the TP=1 decode traced as rank_waits.py traces TP=2
# (the same steps and flags), to set the two side by side kernel by kernel and at the step's ends (sampler,
# copies, embedding); then one TP=2 / TP=1 latency pair. About 3 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/tp1_trace.sh
source scripts/device/begin_cuda.sh tp1_trace
timeout 150 python3 scripts/device/rank_waits.py "$M8" -tp 1 --out "$R" > "$R/rank_waits_tp1.txt" 2>&1
echo "rank_waits -tp 1: exit $?" | tee -a "$OUT/summary.txt"
awk '/^rank/ {n = 14} n > 0 {print; n--}' "$R/rank_waits_tp1.txt" | tee -a "$OUT/summary.txt"
bench_latency tp2 "$M8" 2 "" | tee -a "$OUT/summary.txt"
bench_latency tp1 "$M8" 1 "" | tee -a "$OUT/summary.txt"
pack_results
