#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]): the gate_up GEMV writing silu(gate) * up in its epilogue
# (PAGODA_GEMV_SILU=1: no SiLU-and-mul kernel, 2.7-3.7 us a layer in session 27's traces). Session 27
# found the latency-bound kernels between the GEMVs unchanged by TP (25-26 us a layer): one fewer helps
# both sizes.
#   1. GPU tests (TESTS=1, the default): the gated GEMV bit for bit against the product then SiLU-and-mul
#      (shapes, tokens, splits, bias), and CudaOps.silu_mul_linear with and without the switch;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (1) rounds: TP=2 and TP=1, base and silu.
# About 4 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_silu.sh
# Measured in session 27 and reverted (within the spread): the switch lives in
# benchmarks/results/h200x2_2026-11-28_round27/gemv_silu/gemv_silu.patch (git apply it to rerun).
source scripts/device/begin_cuda.sh gemv_silu
run_tests plugins/platform_cuda/tests/test_dense_gemv.py -k "gated or silu_mul_linear"
declare -A ARM=([base]="" [silu]="PAGODA_GEMV_SILU=1")
ab_latency "${PAIRS:-1}" "base silu" "base silu"
pack_results
