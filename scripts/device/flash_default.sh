#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]), issue 12: is `flash` (packed prefill now the default) ahead
# of `triton` end to end, so that `auto` may prefer it?
#   1. the flash GPU tests of the prefill kernel, packed (default) and one q head a program (=0);
#   2. `pagoda bench throughput`, alternating backends: 300 x 1024/128 (prefill-heavy) and 256 x 256/1024
#      (decode-heavy, batch up to 256 at 256-1280 context);
#   3. `pagoda serve` + `pagoda bench serve` (500 x 256/256, all at once) on flash, then on triton.
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/flash_default.sh
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh flash_default
PAGODA_REQUIRE_FLASH=1 timeout 150 python3 -m pytest -q -p no:cacheprovider plugins/attention_flash/tests \
  -k "mixed_batches or chunked_prefill or prefill_only or one_q_head" > "$R/tests.log" 2>&1
echo "flash tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$R/tests.log" | head | tee -a "$OUT/summary.txt"
M8=benchmarks/configs/llama-3.1-8b
run() {  # NAME BACKEND PROMPTS IN OUT
  timeout 100 pagoda bench throughput "$M8" --load-format dummy --attention-backend "$2" --max-model-len 2048 \
    --num-prompts "$3" --input-len "$4" --output-len "$5" --log-level warning --result-file "$R/$1.json" > /dev/null 2>&1
  echo "$1: exit $? $(python3 scripts/device/summarize_bench.py "$R/$1.json" 2>/dev/null) at ${SECONDS} s" | tee -a "$OUT/summary.txt"
}
for b in triton flash; do run "throughput_1024x128_$b" $b 300 1024 128; done
for b in flash triton; do run "throughput_256x1024_$b" $b 256 256 1024; done
source scripts/device/serve_bench.sh
for b in flash triton; do OUT="$R" serve_bench $b "serve_$b" | tee -a "$OUT/summary.txt"; done
pack_results
