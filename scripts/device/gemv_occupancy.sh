#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: one token at one row a warp runs the dense GEMV
# bounded to 64 registers, four blocks an SM instead of three (PAGODA_GEMV_OCCUPANCY=0: three). `pagoda
# bench latency` dummy bf16 batch 1, arms old (OCCUPANCY=0) and new: Llama-3.1-8B at TP=2 and TP=1,
# Llama-3.2-1B at TP=1 (CASES), PAIRS (2) rounds; then the GEMV's bits either way (TESTS=0: not). About 6 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_occupancy.sh
source scripts/device/begin_cuda.sh gemv_occupancy
C=benchmarks/configs
declare -A ARM=([old]="PAGODA_GEMV_OCCUPANCY=0" [new]="")
for pair in $(seq "${PAIRS:-2}"); do
  for case in ${CASES:-8b:2 8b:1 1b:1}; do
    model="${case%:*}" tp="${case#*:}"; path="$C/llama-3.1-8b"; [ "$model" = 1b ] && path="$C/llama-3.2-1b"
    for arm in old new; do
      bench_latency "latency_p${pair}_${model}_tp${tp}_$arm" "$path" "$tp" "${ARM[$arm]}"
    done
  done
done | tee "$OUT/summary.txt"
run_tests plugins/platform_cuda/tests/test_dense_gemv.py::test_three_or_four_blocks_an_sm_give_the_same_bits
pack_results
