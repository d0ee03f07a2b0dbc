#!/usr/bin/env bash
# On one H200 (tool `run`, kind nvidia-h200), the end of a session's device time: main served by `pagoda serve`
# (triton) and loaded by `pagoda bench serve` (500 x 256/256, dummy Llama-3.1-8B). About 4 minutes.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/serve_main.sh
source scripts/device/begin_cuda.sh serve_main
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_main | tee -a "$OUT/summary.txt"
pack_results
