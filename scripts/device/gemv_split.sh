#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]): split-K for the dense GEMV's long rows (merged in session 19).
#   1. the plugin's dense GEMV gpu tests (every split against float64; bad arguments in a child process);
#   2. benchmarks/dense_gemv.py at one token: each split of each shape, and the rule's pick;
#   3. `pagoda bench latency` batch 1, dummy Llama-3.1-8B and Llama-3.2-1B: the rule against
#      PAGODA_GEMV_SPLIT=1 (one warp a row, main's kernel), alternated twice;
#   4. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256).
# About 7 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gemv_split.sh
source scripts/device/begin_cuda.sh gemv_split
timeout 200 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_dense_gemv.py > "$R/tests.log" 2>&1
echo "dense gemv tests: exit $? ($(tail -1 "$R/tests.log"))"; grep -E "^(FAILED|ERROR)" "$R/tests.log" | head
timeout 200 python3 benchmarks/dense_gemv.py --tokens 1 --out "$R/dense_gemv.json" > "$R/dense_gemv.log" 2>&1
echo "dense gemv benchmark: exit $?"; grep -E "M=1" "$R/dense_gemv.log"
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level warning)
for pair in 1 2; do
  for model in llama-3.1-8b llama-3.2-1b; do
    for split in rule 1; do
      name="latency_${model}_split${split}_p$pair"
      PAGODA_GEMV_SPLIT=$([ "$split" = 1 ] && echo 1 || echo "") timeout 150 pagoda bench latency \
        "benchmarks/configs/$model" "${LAT[@]}" --result-file "$R/$name.json" > "$R/$name.log" 2>&1
      echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$R/$name.json" 2>/dev/null)"
    done
  done
done | tee "$OUT/summary.txt"
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
pack_results
