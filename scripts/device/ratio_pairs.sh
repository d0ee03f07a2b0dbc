#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: main's batch-1 step ratio (TP=2 / TP=1, 8B) over
# PAIRS (3) alternated rounds, now that the argmax takes one launch and the tokens' copy runs beside the
# stream (session 29), with a TP=2 arm of the whole embedding table on every rank (PAGODA_REPLICATED_EMBEDDING=1,
# new, off until measured: no all-reduce a step, 6.3 us of it and a 2.4 us later norm in session 29's trace).
#   1. GPU tests: TP=2 on two GPUs with graphs equal to TP=1, the embedding replicated; the one-launch
#      argmax and the tokens' copy beside the stream (their final forms had not run on a GPU);
#   2. `pagoda bench latency` batch 1: TP=2 main, TP=2 replicated, TP=1 main, PAIRS rounds;
#   3. traces of main at TP=2 (both ranks) and TP=1: the tail from the LM head's end to the next step's
#      first GEMV was 63.6 / 53.8 us before (benchmarks/results/h200x2_2026-11-28_round29/).
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/ratio_pairs.sh
# Ran once (session 30): the replicated table gave nothing, reverted; to run that arm again, apply
# benchmarks/results/h200x2_2026-11-28_round30/ratio_pairs/replicated_embedding.patch first.
source scripts/device/begin_cuda.sh ratio_pairs
PAGODA_REPLICATED_EMBEDDING=1 run_tests tests/engine/test_tensor_parallel.py -k "two_gpus_with_graphs"
run_tests tests/layers/test_argmax.py plugins/platform_cuda/tests/test_copy_stream.py  # -k above would deselect them
declare -A ARM=([main]="" [repl]="PAGODA_REPLICATED_EMBEDDING=1")
ab_latency "${PAIRS:-3}" "main repl" main
rank_waits_arm main
timeout 150 python3 scripts/device/rank_waits.py "$M8" -tp 1 --out "$R/tp1_main" > "$R/rank_waits_tp1.txt" 2>&1
echo "rank_waits -tp 1: exit $?" | tee -a "$OUT/summary.txt"
pack_results
