#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: paced early reads. A GEMV's first wave requests its
# early weights all at once (a TP=2 rank's o: all 16.8 MB while attention runs), and the latency-bound kernel
# it overlaps queues behind that flood (the decode kernel 7.1 us at TP=2 against 5.4 at TP=1, the LL sums).
# PAGODA_GEMV_PACE=N (GB/s) has block b of the first wave sleep b times its early
# bytes / N before requesting them: the same reads at a set rate, so the flood's queue stays short.
#   1. GPU tests: the dense GEMV against its references with the pace at 3000 (the same loads and sums: same bits);
#   2. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds of TP=2 and TP=1: main, 4000 and 2500 GB/s
#      (ARMS to change);
#   3. a trace of TP=2 at the first paced arm (TRACE=0 to skip).
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/pace_ab.sh
# Ran in session 31 (before the pace became the default at 2500 GB/s; its main arm now sets PAGODA_GEMV_PACE=0):
# benchmarks/results/h200x2_2026-11-28_round31/pace_ab/.
source scripts/device/begin_cuda.sh pace_ab
PAGODA_GEMV_PACE=3000 run_tests plugins/platform_cuda/tests/test_dense_gemv.py -k "not tune and not timer"
declare -A ARM=([main]="PAGODA_GEMV_PACE=0" [p4000]="PAGODA_GEMV_PACE=4000" [p2500]="PAGODA_GEMV_PACE=2500" [p6000]="PAGODA_GEMV_PACE=6000")
ARMS="${ARMS:-main p4000 p2500}"
ab_latency "${PAIRS:-2}" "$ARMS" "$ARMS"
set -- $ARMS
[ "${TRACE:-1}" = 1 ] && rank_waits_arm "$2"
pack_results
