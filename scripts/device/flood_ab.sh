#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: session 28 found four warps a row shrink the GEMV's
# early-read flood (a warp requests at most two blocks of its share before the wait), and the LL sums and
# attention it overlaps end 2.3-2.9 us a layer sooner (benchmarks/results/h200x2_2026-11-28_round28/). The
# tune times GEMVs back to back, where that flood costs little; a TP=2 rank's o projection (4096 x 2048) it
# keeps at one warp of two rows, its whole 16.8 MB requested during attention. Arms, in one build:
#   tuned (main); o4: that o on four warps a row (PAGODA_GEMV_BY_SHAPE=4096x2048:4/1);
#   tunenorm: the tune timing each GEMV after an RMS norm, as in a layer (PAGODA_GEMV_TUNE=norm).
#   1. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds: TP=2 every arm, TP=1 tuned and tunenorm (log
#      level info: each run's tuned configurations in its log, grepped into the summary);
#   2. rank_waits.py at TP=2 for each arm of PROFILE_ARMS ("tuned"; "" for none): both ranks' kernel tables;
#      and at TP=1 on main (TP1_TRACE=1, the default), for layer_breakdown.py's TP=1 / TP=2 chart.
#   3. the tune's GPU tests (test_dense_gemv.py -k "tune or timer").
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/flood_ab.sh
source scripts/device/begin_cuda.sh flood_ab
run_tests plugins/platform_cuda/tests/test_dense_gemv.py -k "tune or timer"
LAT=("${LAT[@]/warning/info}")
declare -A ARM=([tuned]="" [o4]="PAGODA_GEMV_BY_SHAPE=4096x2048:4/1" [tunenorm]="PAGODA_GEMV_TUNE=norm")
ab_latency "${PAIRS:-2}" "tuned o4 tunenorm" "tuned tunenorm"
for log in "$R"/latency_p1_*.log; do
  echo "$(basename "$log" .log): $(grep -h "dense GEMV configurations" "$log" | head -1 | sed 's/.*dense GEMV/dense GEMV/')"
done | tee -a "$OUT/summary.txt"
for arm in ${PROFILE_ARMS-tuned}; do rank_waits_arm "$arm"; done
if [ "${TP1_TRACE:-1}" = 1 ]; then
  timeout 150 python3 scripts/device/rank_waits.py "$M8" -tp 1 --out "$R/tp1_tuned" > "$R/rank_waits_tp1.txt" 2>&1
  echo "rank_waits -tp 1: exit $?" | tee -a "$OUT/summary.txt"; head -12 "$R/rank_waits_tp1.txt" | tee -a "$OUT/summary.txt"
fi
pack_results
