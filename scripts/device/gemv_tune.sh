#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the dense GEMV's rows a warp timed per weight shape at
# load time (CsrcOps.tune, pagoda.layers.gemv_tuning) against the kernel's fixed rule (PAGODA_GEMV_TUNE=0):
#   1. the GEMV gpu tests of rows (bit-identical choices, the tuning itself, bad arguments in a child process);
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1 at TP=1 and TP=2, tuned and the rule,
#      alternated PAIRS times (default 2), with each rank 0's tuning line (TPS="1" on one GPU);
#   3. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256), tuned (SERVE=0 skips it).
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_tune.sh
source scripts/device/begin_cuda.sh gemv_tune
timeout 240 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_dense_gemv.py \
  -k "same_bits or tune_times or bad_arguments" > "$R/tests.log" 2>&1
echo "gemv tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$R/tests.log" | head | tee -a "$OUT/summary.txt"
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level info)
for pair in $(seq "${PAIRS:-2}"); do
  for tp in ${TPS:-1 2}; do
    for tune in 1 0; do
      name="latency_p${pair}_tp${tp}_tune$tune"
      PAGODA_GEMV_TUNE=$tune timeout 150 pagoda bench latency benchmarks/configs/llama-3.1-8b "${LAT[@]}" -tp "$tp" \
        --result-file "$R/$name.json" > "$R/$name.log" 2>&1
      echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$R/$name.json" 2>/dev/null)"
      [ "$pair$tune" = 11 ] && grep -o "dense GEMV rows a warp.*" "$R/$name.log" | head -1
    done
  done
done | tee -a "$OUT/summary.txt"
if [ "${SERVE:-1}" = 1 ]; then
  source scripts/device/serve_bench.sh
  OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
fi
pack_results
