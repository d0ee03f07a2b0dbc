#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the GEMV's paced early reads as the default
# (2500 GB/s): the dense GEMV against its references (tune included), then TP=2 on two GPUs with CUDA graphs
# (the LL sums) giving TP=1's greedy tokens. About 4 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/pace_default.sh
source scripts/device/begin_cuda.sh pace_default
run_tests plugins/platform_cuda/tests/test_dense_gemv.py
run_tests "tests/engine/test_tensor_parallel.py::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]"
pack_results
