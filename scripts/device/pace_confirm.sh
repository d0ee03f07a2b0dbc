#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the pace's rate, after pace_ab.sh's two pairs
# (main 2.62 / 2.61 ms at TP=2, 4.30 / 4.30 at TP=1; 2500 GB/s 2.47 / 2.43 and 4.14 / 4.15).
#   1. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds of TP=2 and TP=1: main, 2500 and 1500 GB/s;
#   2. `pagoda serve` (triton, GPU 0) + `pagoda bench serve` 500 x 256/256 with the pace at 2500 GB/s.
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/pace_confirm.sh
# Ran in session 31, before the pace became the default (its main arm now sets PAGODA_GEMV_PACE=0):
# benchmarks/results/h200x2_2026-11-28_round31/pace_confirm/.
source scripts/device/begin_cuda.sh pace_confirm
source scripts/device/serve_bench.sh
declare -A ARM=([main]="PAGODA_GEMV_PACE=0" [p2500]="PAGODA_GEMV_PACE=2500" [p1500]="PAGODA_GEMV_PACE=1500")
ARMS="${ARMS:-main p2500 p1500}"
ab_latency "${PAIRS:-2}" "$ARMS" "$ARMS"
OUT="$R" CUDA_VISIBLE_DEVICES=0 PAGODA_GEMV_PACE=2500 serve_bench triton serve_pace | tee -a "$OUT/summary.txt"
pack_results
