#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the GEMV tune under TP takes each configuration's
# time as the slowest rank's, so both ranks choose alike (session 30 saw one TP=2 start where rank 0 ran the
# LM head on two rows a warp, 122 us a step, and rank 1 on two warps a row, 118 us).
#   1. GPU tests: the tune's (test_dense_gemv.py -k "tune or timer"), TP=2 on two GPUs with graphs (LL);
#   2. `pagoda bench latency` 8B batch 1, PAIRS (3) rounds of TP=2 and TP=1 (log level info: the tuned
#      configurations of each run in the summary).
# About 7 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/tune_agree.sh
source scripts/device/begin_cuda.sh tune_agree
run_tests plugins/platform_cuda/tests/test_dense_gemv.py -k "tune or timer"  # -k applies to every node id named
run_tests "tests/engine/test_tensor_parallel.py::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]"
LAT=("${LAT[@]/warning/info}")
declare -A ARM=([main]="")
ab_latency "${PAIRS:-3}" main main
for log in "$R"/latency_p*.log; do
  echo "$(basename "$log" .log): $(grep -h "dense GEMV configurations" "$log" | head -1 | sed 's/.*dense GEMV/dense GEMV/')"
done | tee -a "$OUT/summary.txt"
pack_results
