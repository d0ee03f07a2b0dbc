#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: since the GEMV's early reads really come before
# its wait (session 24), the 8B TP=2 profile shows the GEMVs 369 us a step shorter and the LL sums,
# attention and SiLU, during which those reads now stream, 304 us longer (latency-bound kernels behind a
# flood of weight reads; benchmarks/results/h200x2_2026-11-28_round25/). Arms in one build, alternated:
#   base  the defaults;
#   late  PAGODA_LL_LATE_TRIGGER=1: the fused LL sum-and-norm lets the next GEMV be scheduled only once the
#         peers' lines are summed, not as soon as it starts (TP=2 only);
#   p1    PAGODA_GEMV_PRELOAD=1: one block of each row before the wait, not two;
#   lp1   both;
#   e0    PAGODA_PDL_EARLY=0: attention waits before it lets the o GEMV be scheduled.
#   1. GPU test (TESTS=1, the default): the LL sums and fused norm bit for bit against NCCL, late trigger on;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, PAIRS (2) rounds: TP=2 with ARMS (base late
#      p1 lp1), TP=1 with TP1_ARMS (base p1);
#   3. (PROFILE=1, the default) profile_decode.py at TP=2 with ARM_PROFILE (late), per kernel.
# Each latency run took about 30 s in session 25: the defaults take about 9 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/early_contention.sh
source scripts/device/begin_cuda.sh early_contention
run_tests "tests/engine/test_tensor_parallel.py::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll-late]"
declare -A ARM=([base]="" [late]="PAGODA_LL_LATE_TRIGGER=1" [p1]="PAGODA_GEMV_PRELOAD=1"
                [lp1]="PAGODA_LL_LATE_TRIGGER=1 PAGODA_GEMV_PRELOAD=1" [e0]="PAGODA_PDL_EARLY=0")
for pair in $(seq "${PAIRS:-2}"); do
  for arm in ${ARMS:-base late p1 lp1}; do bench_latency "latency_p${pair}_tp2_$arm" "$M8" 2 "${ARM[$arm]}"; done
  for arm in ${TP1_ARMS:-base p1}; do bench_latency "latency_p${pair}_tp1_$arm" "$M8" 1 "${ARM[$arm]}"; done
done | tee -a "$OUT/summary.txt"
if [ "${PROFILE:-1}" = 1 ]; then
  arm="${ARM_PROFILE:-late}"
  env ${ARM[$arm]} timeout 100 python3 scripts/device/profile_decode.py "$M8" -tp 2 --out "$R" > "$R/profile_$arm.log" 2>&1
  echo "profile $arm: exit $?" | tee -a "$OUT/summary.txt"
  python3 scripts/device/trace_kernels.py "$R/trace_tp2_b1.json" > "$R/kernels_$arm.txt" 2>&1
  head -12 "$R/kernels_$arm.txt" | tee -a "$OUT/summary.txt"
  gzip -f "$R"/trace_*.json 2>/dev/null
fi
pack_results
