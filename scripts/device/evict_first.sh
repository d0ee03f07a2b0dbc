#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the dense GEMV's weights read under the L2 policy
# evict_first (PAGODA_GEMV_EVICT_FIRST=1). Session 25 found the latency-bound kernels between the GEMVs (the
# LL sums, attention, SiLU) 304 us a step slower since the next GEMV's early weight reads stream during
# them; read with the default policy, the weights (7.5 GB a step through a 60 MB L2) also push out what those
# kernels read again each layer (the KV cache, the residual, the LL sum's epoch, the norms' weights), whose
# misses then queue behind that flood. Arms in one build, alternated:
#   base  the defaults;   ef  PAGODA_GEMV_EVICT_FIRST=1.
#   1. GPU test (TESTS=1, the default): the GEMV's bits with and without the switch;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (2) rounds of TP=2 and TP=1, base and ef;
#   3. (PROFILE=1, the default) rank_waits.py with ef: both ranks' kernel tables and their sums' waits.
# About 7 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/evict_first.sh
# Measured in session 27 and reverted: the switch lives in
# benchmarks/results/h200x2_2026-11-28_round27/evict_first/evict_first.patch (git apply it to rerun).
source scripts/device/begin_cuda.sh evict_first
run_tests plugins/platform_cuda/tests/test_dense_gemv.py::test_weights_evicted_first_from_l2_give_the_same_bits
declare -A ARM=([base]="" [ef]="PAGODA_GEMV_EVICT_FIRST=1")
ab_latency "${PAIRS:-2}" "base ef" "base ef"
[ "${PROFILE:-1}" = 1 ] && rank_waits_arm ef
pack_results
