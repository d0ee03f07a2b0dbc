#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl", ".ab"]), issue 15: the weights a GEMV (and the LL norm)
# reads before griddepcontrol.wait, read with a weak load so that ptxas keeps them before it (it hoisted
# the wait above the read-only loads: docs/cuda.md). An A/B on one machine: this tree against the
# baseline build of .ab (scripts/device/ab_base.sh; .ab holds main's versions of the changed csrc files):
#   1. GPU tests: the GEMV's bits with one or two blocks early and a graph of dependents, the LL sums and
#      norm against NCCL;
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, base and new at TP=2 and TP=1, PAIRS (2).
# About 8 minutes, 9.5 with PAIRS=3 TESTS=0 (session 24's call, PAIRS=2 with tests, ran past 420 s in its
# second pair). -> $OUT/summary.txt, $OUT/results.tgz
#   mkdir -p .ab/csrc/kernels && for f in dense_gemv.cu ll_all_reduce.cu dependent_launch.h; do
#     git show cbc99c8:csrc/kernels/$f > .ab/csrc/kernels/$f; done   # main before the change
#   bash scripts/device/early_loads.sh
source scripts/device/begin_cuda.sh early_loads
source scripts/device/ab_base.sh .ab; echo "baseline build: ${SECONDS} s"
P=plugins/platform_cuda/tests
run_tests "$P/test_dense_gemv.py::test_one_or_two_blocks_before_the_wait_give_the_same_bits" \
  "$P/test_dense_gemv.py::test_graph_replays_a_chain_of_dependent_kernels" \
  "tests/engine/test_tensor_parallel.py::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll]"
for pair in $(seq "${PAIRS:-2}"); do
  for tp in 2 1; do
    bench_latency "latency_p${pair}_tp${tp}_base" "$M8" "$tp" "PYTHONPATH=$BASE_PYTHONPATH"
    bench_latency "latency_p${pair}_tp${tp}_new" "$M8" "$tp" ""
  done
done | tee -a "$OUT/summary.txt"
pack_results
