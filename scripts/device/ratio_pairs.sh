#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: main's batch-1 step ratio (TP=2 / TP=1, 8B) over
# PAIRS (4) alternated pairs, now that the argmax takes one launch and the tokens' copy runs beside the stream
# (session 29), and the tail those change, traced at TP=2 (both ranks) and TP=1: the time from the LM head's
# end to the next step's first GEMV was 63.6 / 53.8 us before (benchmarks/results/h200x2_2026-11-28_round29/).
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/ratio_pairs.sh
source scripts/device/begin_cuda.sh ratio_pairs
declare -A ARM=([main]="")
ab_latency "${PAIRS:-4}" main main
rank_waits_arm main
timeout 150 python3 scripts/device/rank_waits.py "$M8" -tp 1 --out "$R/tp1_main" > "$R/rank_waits_tp1.txt" 2>&1
echo "rank_waits -tp 1: exit $?" | tee -a "$OUT/summary.txt"
pack_results
