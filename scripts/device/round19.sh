#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), main after session 19's changes (split-K GEMV for long
# rows, the one-kernel vocab-parallel embedding, greedy TP steps without rank 0's token broadcast):
#   1. GPU tests: the dense GEMV's, the masked embedding's, TP=2 equals TP=1 with graphs (LL path);
#   2. scripts/device/check_errors.py: do the bindings' failed argument checks raise or crash?
#   3. `pagoda bench latency` Llama-3.1-8B dummy bf16 batch 1, TP=1 / TP=2 alternated PAIRS (default 3);
#   4. profile_decode.py at TP=2, per kernel (trace_kernels.py);
#   5. benchmarks/dense_gemv.py at one token with two rows a warp forced (PAGODA_GEMV_ROWS=2).
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/round19.sh
source scripts/device/begin_cuda.sh round19
P=plugins/platform_cuda/tests
timeout 150 python3 -m pytest -q -p no:cacheprovider $P/test_dense_gemv.py $P/test_cuda_masked_embedding.py \
  "tests/engine/test_tensor_parallel.py::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]" > "$R/tests.log" 2>&1
echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$R/tests.log" | head | tee -a "$OUT/summary.txt"
timeout 60 python3 scripts/device/check_errors.py 2>&1 | tee -a "$OUT/summary.txt"
M8=benchmarks/configs/llama-3.1-8b
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level warning)
for pair in $(seq "${PAIRS:-3}"); do
  for tp in 1 2; do
    name="latency_p${pair}_tp$tp"
    timeout 150 pagoda bench latency "$M8" "${LAT[@]}" -tp "$tp" --result-file "$R/$name.json" > "$R/$name.log" 2>&1
    echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$R/$name.json" 2>/dev/null)"
  done
done | tee -a "$OUT/summary.txt"
timeout 120 python3 scripts/device/profile_decode.py "$M8" -tp 2 --out "$R" > "$R/profile_tp2.log" 2>&1
echo "profile tp=2: exit $?"; python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
k = r['decode_by_kind']; print(r['step_ms'], 'idle', k['idle_us'], json.dumps(k['exclusive_by_kind_us']))" \
  "$R/profile_tp2_b1.json" 2>&1 | tee -a "$OUT/summary.txt"
python3 scripts/device/trace_kernels.py "$R/trace_tp2_b1.json" > "$R/kernels_tp2.txt" 2>&1
head -16 "$R/kernels_tp2.txt" | tee -a "$OUT/summary.txt"
gzip -f "$R"/trace_*.json 2>/dev/null
PAGODA_GEMV_ROWS=2 timeout 100 python3 benchmarks/dense_gemv.py --tokens 1 --out "$R/dense_gemv_rows2.json" \
  > "$R/dense_gemv_rows2.log" 2>&1
echo "dense gemv, two rows a warp: exit $?"; grep -E "M=1" "$R/dense_gemv_rows2.log" | tee -a "$OUT/summary.txt"
pack_results
