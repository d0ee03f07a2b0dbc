#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]), issue 12: where flash loses to triton end to end.
#   1. profile_decode.py at batch 256 with 1024-token prompts (the decode steps of 300 x 1024/128),
#      flash and triton: step time and kernel time by kind;
#   2. `pagoda bench throughput` 300 x 1024/128, triton then flash.
# About 5 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/flash_e2e_gap.sh
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh flash_e2e_gap
M8=benchmarks/configs/llama-3.1-8b
for backend in flash triton; do
  timeout 150 python3 scripts/device/profile_decode.py "$M8" --batch 256 --input-len 1024 --backend "$backend" \
    --out "$R/$backend" > "$R/profile_$backend.log" 2>&1
  echo "profile $backend: exit $?"; python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
k = r['decode_by_kind']; print(sys.argv[2], r['step_ms'], 'ms, busy', k['busy_us'], 'idle', k['idle_us'], \
json.dumps(k['exclusive_by_kind_us']))" "$R/$backend/profile_tp1_b256.json" "$backend" 2>&1 | tee -a "$OUT/summary.txt"
  rm -f "$R/$backend"/trace_*.json
done
for backend in triton flash; do
  timeout 120 pagoda bench throughput "$M8" --load-format dummy --attention-backend "$backend" --max-model-len 2048 \
    --num-prompts 300 --input-len 1024 --output-len 128 --log-level warning --result-file "$R/throughput_$backend.json" \
    > "$R/throughput_$backend.log" 2>&1
  echo "throughput $backend: exit $? $(python3 scripts/device/summarize_bench.py "$R/throughput_$backend.json" 2>/dev/null)"
done | tee -a "$OUT/summary.txt"
pack_results
