#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the dense GEMV stages more of its rows in shared
# memory before the wait (PAGODA_GEMV_STAGED=D: D blocks past the two in registers, cp.async). Session 27
# (benchmarks/results/h200x2_2026-11-28_round27/) found each LL sum ending about 2 us after the next GEMV's
# early reads drained, the DRAM idle meanwhile: with more early reads (up to a whole share at TP=2) it
# streams through that wait too. Arms in one build, alternated: base; s1, s2 (PAGODA_GEMV_STAGED=1, 2).
#   1. GPU tests (TESTS=1, the default): the GEMV's bits with 1 and 3 staged blocks against none;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (2) rounds: TP=2 base s1 s2, TP=1 base s2;
#   3. (PROFILE=1, the default) rank_waits.py with s2: both ranks' kernel tables and their sums' waits.
# About 8 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/staged.sh
# Measured in session 27 and reverted (slower): the switch lives in
# benchmarks/results/h200x2_2026-11-28_round27/staged/staged.patch (git apply it to rerun).
source scripts/device/begin_cuda.sh staged
run_tests "plugins/platform_cuda/tests/test_dense_gemv.py::test_blocks_staged_in_shared_memory_give_the_same_bits"
declare -A ARM=([base]="" [s1]="PAGODA_GEMV_STAGED=1" [s2]="PAGODA_GEMV_STAGED=2")
ab_latency "${PAIRS:-2}" "base s1 s2" "base s2"
[ "${PROFILE:-1}" = 1 ] && rank_waits_arm s2
pack_results
