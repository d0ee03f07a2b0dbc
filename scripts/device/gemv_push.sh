#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the row-parallel GEMVs (o, down) push their
# output's lines to the peer's LL buffer as their blocks finish (PAGODA_LL_GEMV_PUSH=1), so the fused
# LL sum-and-norm after them only polls and sums: the push, the read of x and one kernel boundary leave
# the sum's critical path. The 8B TP=2 profile (benchmarks/results/h200x2_2026-11-28_round26/) has the
# LL sums at 5.3 us each, 66 a step.
#   1. GPU tests (TESTS=1, the default): the pushing GEMV and the fused norm after it bit for bit against
#      the csrc GEMV, NCCL and the csrc norm (eager, and 32 layers replayed from a graph); a bf16 TP=2
#      engine's greedy tokens with the pushing GEMVs equal to those without;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (3) rounds: TP=2 with ARMS (base
#      push; also all: the push, the late trigger and one early block), TP=1 base;
#   3. (PROFILE=1, the default) profile_decode.py at TP=2 with the push, per kernel.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_push.sh
source scripts/device/begin_cuda.sh gemv_push
run_tests "tests/engine/test_tensor_parallel.py::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll-push]" \
  "tests/engine/test_tensor_parallel.py::test_tp2_bf16_decode_with_pushing_gemvs_equals_without"
declare -A ARM=([base]="" [push]="PAGODA_LL_GEMV_PUSH=1"
                [all]="PAGODA_LL_GEMV_PUSH=1 PAGODA_LL_LATE_TRIGGER=1 PAGODA_GEMV_PRELOAD=1")
for pair in $(seq "${PAIRS:-3}"); do
  for arm in ${ARMS:-base push}; do bench_latency "latency_p${pair}_tp2_$arm" "$M8" 2 "${ARM[$arm]}"; done
  bench_latency "latency_p${pair}_tp1_base" "$M8" 1 ""
done | tee -a "$OUT/summary.txt"
if [ "${PROFILE:-1}" = 1 ]; then
  PAGODA_LL_GEMV_PUSH=1 timeout 100 python3 scripts/device/profile_decode.py "$M8" -tp 2 --out "$R" > "$R/profile_push.log" 2>&1
  echo "profile push: exit $?" | tee -a "$OUT/summary.txt"
  python3 scripts/device/trace_kernels.py "$R/trace_tp2_b1.json" > "$R/kernels_push.txt" 2>&1
  head -12 "$R/kernels_push.txt" | tee -a "$OUT/summary.txt"
  gzip -f "$R"/trace_*.json 2>/dev/null
fi
pack_results
