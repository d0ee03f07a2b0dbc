#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: session 28's first calls found PAGODA_GEMV_SPLIT=4
# (every one-token GEMV split over four warps a row, not only k >= 7168) ahead at both sizes (8B batch-1
# step TP=2 2.78 -> 2.53 / 2.80 -> 2.61 ms, TP=1 4.47 -> 4.19 / 4.48 -> 4.18). Before a new rule:
#   1. benchmarks/dense_gemv.py at one token: each split of each shape alone (what a tune would time);
#   2. `pagoda bench latency` batch 1: the 8B at TP=1 and TP=2 and the 1B at TP=1, the rule against
#      PAGODA_GEMV_SPLIT=2 and 4, PAIRS (1) rounds.
# About 6 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_split_all.sh
source scripts/device/begin_cuda.sh gemv_split_all
timeout 200 python3 benchmarks/dense_gemv.py --tokens 1 --out "$R/dense_gemv.json" > "$R/dense_gemv.log" 2>&1
echo "dense gemv benchmark: exit $?" | tee -a "$OUT/summary.txt"; grep -E "M=1" "$R/dense_gemv.log" | tee -a "$OUT/summary.txt"
declare -A ARM=([rule]="" [split2]="PAGODA_GEMV_SPLIT=2" [split4]="PAGODA_GEMV_SPLIT=4")
for pair in $(seq "${PAIRS:-1}"); do
  for arm in rule split2 split4; do
    bench_latency "latency_p${pair}_8b_tp1_$arm" "$M8" 1 "${ARM[$arm]}"
    bench_latency "latency_p${pair}_8b_tp2_$arm" "$M8" 2 "${ARM[$arm]}"
    bench_latency "latency_p${pair}_1b_tp1_$arm" "$M1" 1 "${ARM[$arm]}"
  done
done | tee -a "$OUT/summary.txt"
pack_results
