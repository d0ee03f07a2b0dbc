#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: two switches (session 29; on by default since it) for the
# batch-1 step's tail, which session 29's traces put at 54 us (TP=1) and 64 us (TP=2) from the LM head to
# the next step's first GEMV: the greedy argmax in one Triton launch instead of four torch kernels
# (PAGODA_TRITON_ARGMAX=1), and the sampled tokens' copy to the host on a stream of its own, so that the
# next step's input copy does not queue behind it (PAGODA_COPY_STREAM=1).
#   1. GPU tests: the argmax (both ways, a graph replay), the copies (both ways), and the CUDA engine and
#      graph tests (greedy tokens against HF, with and without graphs, overlap) with both switches on;
#   2. `pagoda bench latency` batch 1, PAIRS (2) rounds of 8B TP=2, 8B TP=1 and the 1B, main and both
#      switches on; no run starts after 460 s;
#   3. `pagoda serve` + `pagoda bench serve` (triton, 500 x 256/256) with both on, if before 400 s.
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/step_tail.sh
source scripts/device/begin_cuda.sh step_tail
BOTH="PAGODA_TRITON_ARGMAX=1 PAGODA_COPY_STREAM=1"
run_tests tests/layers/test_argmax.py plugins/platform_cuda/tests/test_copy_stream.py
env $BOTH timeout 150 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_cuda_engine.py \
  plugins/platform_cuda/tests/test_cuda_graphs.py -k "hf or without_graphs or overlap" > "$R/tests_both.log" 2>&1
echo "engine tests, both on: exit $? ($(tail -1 "$R/tests_both.log"))" | tee -a "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$R/tests_both.log" | head | tee -a "$OUT/summary.txt"
declare -A ARM=([main]="" [both]="$BOTH")
for pair in $(seq "${PAIRS:-2}"); do
  for run in "8b 2 $M8" "8b 1 $M8" "1b 1 $M1"; do
    set -- $run
    for arm in main both; do
      [ "$SECONDS" -lt 460 ] || break 3
      bench_latency "latency_p${pair}_$1_tp$2_$arm" "$3" "$2" "${ARM[$arm]}"
    done
  done
done | tee -a "$OUT/summary.txt"
if [ "$SECONDS" -lt 400 ]; then
  source scripts/device/serve_bench.sh
  export $BOTH
  OUT="$R" serve_bench triton serve_both | tee -a "$OUT/summary.txt"
fi
pack_results
