#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: is one GPU of the pair slower than the other?
# With the pushing GEMV (session 26) the fused LL norm has nothing left to do but wait for the peer's
# lines, and rank 0's profile still shows it 11.8 us a sum: rank 1 ends its GEMVs later. The 8B batch-1
# step at TP=1 on GPU 0 and on GPU 1, PAIRS (2) rounds alternated.
# -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gpu_skew.sh
source scripts/device/begin_cuda.sh gpu_skew
for pair in $(seq "${PAIRS:-2}"); do
  for gpu in 0 1; do bench_latency "latency_p${pair}_tp1_gpu$gpu" "$M8" 1 "CUDA_VISIBLE_DEVICES=$gpu"; done
done | tee -a "$OUT/summary.txt"
nvidia-smi --query-gpu=index,clocks.max.sm,clocks.max.mem,power.limit,temperature.gpu --format=csv | tee -a "$OUT/summary.txt"
pack_results
