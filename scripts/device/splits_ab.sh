#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: what the decode's KV split costs at the batch-1
# step's short context (128 + 128 tokens). bench_latency's --max-model-len 2048 gives 8 slices of which two
# hold keys, and a reduce kernel after the decode kernel: a layer's o GEMV waits for both. The arm s1 pins one
# slice (PAGODA_DECODE_SPLITS=1: no reduce kernel; each program takes all 256 keys), s2 two.
#   1. GPU test: the Triton kernels with the splits pinned (test_gpu_kernels.py);
#   2. `pagoda bench latency` 8B batch 1, PAIRS (3) rounds of TP=2 and TP=1, main and s1 (ARMS to change);
#   3. a trace of TP=2 at s1 (layer timeline against round30's main).
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/splits_ab.sh
# Ran in session 31: one slice saved about 10 us a step at both sizes (benchmarks/results/h200x2_2026-11-28_round31/).
source scripts/device/begin_cuda.sh splits_ab
run_tests plugins/attention_triton/tests/test_gpu_kernels.py
declare -A ARM=([main]="" [s1]="PAGODA_DECODE_SPLITS=1" [s2]="PAGODA_DECODE_SPLITS=2")
ab_latency "${PAIRS:-3}" "${ARMS:-main s1}" "${ARMS:-main s1}"
[ "${TRACE:-1}" = 1 ] && rank_waits_arm s1
pack_results
