#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the dense GEMV's split (1, 2 or 4 warps a row) timed
# per weight shape with its rows a warp (CsrcOps.tune, session 28), against the kernel's rules (PAGODA_GEMV_TUNE=0):
#   1. the plugin's dense GEMV gpu tests (every split and rows against float64, the tune's six timed and launched);
#   2. `pagoda bench latency` batch 1 (log level info: the tune's choices in each log), PAIRS (1) rounds:
#      the 8B at TP=1 and TP=2 and the 1B at TP=1 tuned, the 8B at TP=1 and TP=2 on the rules;
#   3. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256).
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_tuned_split.sh
source scripts/device/begin_cuda.sh gemv_tuned_split
run_tests plugins/platform_cuda/tests/test_dense_gemv.py
LAT=("${LAT[@]/warning/info}")
for pair in $(seq "${PAIRS:-1}"); do
  bench_latency "latency_p${pair}_8b_tp1_tuned" "$M8" 1 ""
  bench_latency "latency_p${pair}_8b_tp2_tuned" "$M8" 2 ""
  bench_latency "latency_p${pair}_1b_tp1_tuned" "$M1" 1 ""
  bench_latency "latency_p${pair}_8b_tp1_rules" "$M8" 1 "PAGODA_GEMV_TUNE=0"
  bench_latency "latency_p${pair}_8b_tp2_rules" "$M8" 2 "PAGODA_GEMV_TUNE=0"
done | tee -a "$OUT/summary.txt"
grep -h "dense GEMV configurations" "$R"/latency_p1_*_tuned.log | sed 's/.*dense GEMV/dense GEMV/' | tee -a "$OUT/summary.txt"
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
pack_results
