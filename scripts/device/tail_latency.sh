#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): where Pagoda's served tail latency goes (TTFT p99 and ITL p99 were
# 1.3-1.9x vLLM's at 4-16 req/s on an H200, 2026-11-27, on triton attention):
#   1. `pagoda serve` (auto attention: flash) with PAGODA_TRACE_DIR, `pagoda bench serve --save-detailed` at
#      16 and 4 req/s (256/256, 30 s each); scripts/device/tail_analysis.py joins the client's chunk times
#      with the core's steps (are the long gaps mixed prefill+decode steps, slow steps, or outside the core?)
#      and splits the TTFT into its parts;
#   2. scripts/device/profile_mixed.py on flash: a 256-token prompt joining 0 / 16 / 64 running decodes;
#   3. scripts/device/first_shapes.py, then again under CUDA_MODULE_LOADING=EAGER: what an eager step pays
#      the first time its token count appears, and whether a coarse warm-up removes it.
# About 7 minutes. -> $OUT/summary.txt, $OUT/results.tgz. (Issue 12's sanitizer run on the packed prefill:
# PARTS=tests,sanitize bash scripts/device/flash.sh.)
#   bash scripts/device/tail_latency.sh
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh tail_latency
source scripts/device/wait_for_server.sh
tok=$(bash scripts/device/llama3_tokenizer.sh /tmp/llama3-tokenizer)
PAGODA_TRACE_DIR="$R/trace" pagoda serve benchmarks/configs/llama-3.1-8b --load-format dummy --max-model-len 2048 \
  --tokenizer "$tok" --log-level warning --port 8000 --served-model-name llama > "$R/server.log" 2>&1 &
pid=$!
if t=$(wait_for_server $pid "$R/server.log" 200); then echo "serve: up after ${t} s" | tee "$OUT/summary.txt"; fi
timeout 60 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts 64 --input-len 256 --output-len 16 \
  --ignore-eos --no-progress --seed 1 > /dev/null 2>&1  # warm-up on other prompts
for rate in 16 4; do
  timeout 90 pagoda bench serve --base-url http://127.0.0.1:8000 --num-prompts $((rate * 30)) --request-rate $rate \
    --input-len 256 --output-len 256 --ignore-eos --no-progress --save-detailed --seed "$rate" \
    --result-file "$R/rate$rate.json" \
    > "$R/rate$rate.log" 2>&1
  echo "rate $rate: exit $? $(python3 scripts/device/summarize_bench.py "$R/rate$rate.json" 2>/dev/null)" | tee -a "$OUT/summary.txt"
done
kill -TERM $pid; timeout 60 tail --pid=$pid -f /dev/null
for rate in 16 4; do  # the trace holds both rates (own seeds: no prompt of one is cached by the other)
  python3 scripts/device/tail_analysis.py "$R/trace/core.jsonl" "$R/rate$rate.json" --out "$R/tail_rate$rate.json" \
    > /dev/null 2>&1
  echo "rate $rate: $(python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))))" "$R/tail_rate$rate.json")" \
    | tee -a "$OUT/summary.txt"
done
timeout 150 python3 scripts/device/profile_mixed.py benchmarks/configs/llama-3.1-8b --backend flash --decodes 0,16,64 --out "$R/mixed" > "$R/mixed.log" 2>&1
echo "profile_mixed: exit $?"; tail -4 "$R/mixed.log" | tee -a "$OUT/summary.txt"
for loading in LAZY EAGER; do
  CUDA_MODULE_LOADING=$loading timeout 150 python3 scripts/device/first_shapes.py benchmarks/configs/llama-3.1-8b \
    --out "$R/first_shapes_$loading.json" > "$R/first_shapes_$loading.log" 2>&1
  echo "first_shapes, CUDA_MODULE_LOADING=$loading: exit $? $(tail -1 "$R/first_shapes_$loading.log")" | tee -a "$OUT/summary.txt"
done
pack_results
