#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the row-parallel GEMVs of a batch-1 step pushing
# their rows to the peer as they compute them, so the fused LL norm only sums (PAGODA_LL_PUSH_GEMV=1, new, off
# until measured). Session 30's traces: the LL norm ends 4.7 us after its GEMV at TP=2, the plain norm 3.0 at
# TP=1 (after down), 64 sums a step (benchmarks/results/h200x2_2026-11-28_round30/).
#   1. GPU tests: the pushing GEMV + norm against the plain pair to the bit (every split and rows a warp,
#      eager and a graph-replayed chain), bf16 TP=2 tokens with and without it; the one-launch argmax and
#      the tokens' copy beside the stream (not run on a GPU since session 29's changes); the GEMV's own tests;
#   2. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds: TP=2 main, TP=2 push, TP=1 main;
#   3. with TRACE=1, rank_waits of the push arm.
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/push_gemv.sh
# Ran once (session 30): no gain, reverted; to run again, apply
# benchmarks/results/h200x2_2026-11-28_round30/push_gemv/push_gemv.patch first.
source scripts/device/begin_cuda.sh push_gemv
TP=tests/engine/test_tensor_parallel.py
run_tests "$TP::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll]" \
  "$TP::test_tp2_gemvs_pushing_their_sums_give_the_same_bf16_tokens" tests/layers/test_argmax.py \
  plugins/platform_cuda/tests/test_copy_stream.py
run_tests plugins/platform_cuda/tests/test_dense_gemv.py -k "not tune and not timer"
declare -A ARM=([main]="" [push]="PAGODA_LL_PUSH_GEMV=1")
ab_latency "${PAIRS:-2}" "main push" main
[ "${TRACE:-0}" = 1 ] && rank_waits_arm push
pack_results
