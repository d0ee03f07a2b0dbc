#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issues 15 and 12: the Triton attention kernels and the
# flash split reduction let the next kernel start before they wait (PAGODA_PDL_EARLY=0: wait first), and
# the dense GEMV requests two blocks of each row before its wait (PAGODA_GEMV_PRELOAD=1: one), so the o
# projection's weights stream while attention ends:
#   1. GPU tests: the Triton kernels' bits with PDL 0/1/2, the GEMV's bits with one or two blocks early,
#      bf16 engine tokens equal with either order;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, arms old (EARLY=0 PRELOAD=1), early
#      (PRELOAD=1) and new (defaults) at TP=2, old and new at TP=1 (TPS="1" on one GPU), PAIRS (2) rounds;
#   3. profile_decode.py at TP=2 with the new order, per kernel (trace_kernels.py).
# ARMS="new" PAIRS=3 TESTS=0: the current defaults alone, three rounds, no GPU tests.
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/early_trigger.sh
source scripts/device/begin_cuda.sh early_trigger
P=plugins/platform_cuda/tests
run_tests plugins/attention_triton/tests/test_gpu_kernels.py::test_dependent_launch_gives_the_same_bits \
  "$P/test_dense_gemv.py::test_one_or_two_blocks_before_the_wait_give_the_same_bits" \
  "$P/test_dense_gemv.py::test_graph_replays_a_chain_of_dependent_kernels" \
  "$P/test_cuda_graphs.py::test_bf16_greedy_equal_with_either_dependent_launch_order"
declare -A ARM=([old]="PAGODA_PDL_EARLY=0 PAGODA_GEMV_PRELOAD=1" [early]="PAGODA_GEMV_PRELOAD=1" [new]="")
for pair in $(seq "${PAIRS:-2}"); do
  for tp in ${TPS:-2 1}; do
    arms="${ARMS:-old early new}"; [ "$tp" = 1 ] && arms="${arms/early/}"
    for arm in $arms; do
      bench_latency "latency_p${pair}_tp${tp}_$arm" "$M8" "$tp" "${ARM[$arm]}"
    done
  done
done | tee -a "$OUT/summary.txt"
tp="${TPS:-2 1}"; tp="${tp%% *}"
timeout 120 python3 scripts/device/profile_decode.py "$M8" -tp "$tp" --out "$R" > "$R/profile_tp$tp.log" 2>&1
echo "profile tp=$tp: exit $?"; python3 scripts/device/trace_kernels.py "$R/trace_tp${tp}_b1.json" > "$R/kernels_tp$tp.txt" 2>&1
head -16 "$R/kernels_tp$tp.txt" | tee -a "$OUT/summary.txt"
gzip -f "$R"/trace_*.json 2>/dev/null
pack_results
