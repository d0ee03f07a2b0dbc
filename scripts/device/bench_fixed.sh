#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): the flash GPU tests of the decode kernel and the packed prefill,
# then `pagoda bench throughput` after its warm-up fix (no prefix-cache hits in the timed run): 300 x
# 1024/128 triton, flash, flash with PAGODA_FLASH_SHORT_QUERIES=16 (and with PAGODA_FLASH_PACK_GQA=1 too),
# then 1000 x 256/256 triton; then benchmarks/attention_flash.py --verify with the prefill kernel unpacked
# and packed (verify steps, and 16 tokens after 1008 cached) and --quick packed (long prefills). Results
# straight into $OUT (partial results survive a cut). About 9 minutes.
#   bash scripts/device/bench_fixed.sh
set -uo pipefail
OUT="${OUT:-$PWD/bench_fixed_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash
echo "install: ${SECONDS} s"
# the flash decode kernel's grid (row blocks adjacent) and the packed prefill are new since the last GPU run
PAGODA_REQUIRE_FLASH=1 timeout 240 python3 -m pytest -q -p no:cacheprovider plugins/attention_flash/tests \
  -k "short or group20 or split_kv or replays or verify or packed" > "$OUT/flash_tests.log" 2>&1
echo "flash tests: exit $? ($(tail -1 "$OUT/flash_tests.log"))"
M8=benchmarks/configs/llama-3.1-8b
run() {  # NAME BACKEND PROMPTS IN OUT [ENV=VALUE...]
  env "${@:6}" timeout 100 pagoda bench throughput "$M8" --load-format dummy --attention-backend "$2" --max-model-len 2048 \
    --num-prompts "$3" --input-len "$4" --output-len "$5" --log-level warning --result-file "$OUT/$1.json" > /dev/null 2>&1
  echo "$1: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/$1.json" 2>/dev/null) at ${SECONDS} s"
}
run throughput_1024x128_triton triton 300 1024 128
run throughput_1024x128_flash flash 300 1024 128
run throughput_1024x128_flash_short16 flash 300 1024 128 PAGODA_FLASH_SHORT_QUERIES=16
run throughput_1024x128_flash_short16_pack flash 300 1024 128 PAGODA_FLASH_SHORT_QUERIES=16 PAGODA_FLASH_PACK_GQA=1
run throughput_256x256_triton triton 1000 256 256
for pack in 0 1; do  # the "flash prefill kernel" column: one q head a program (0) or a kv head's q heads packed (1)
  PAGODA_FLASH_PACK_GQA=$pack timeout 120 python3 benchmarks/attention_flash.py --verify \
    --out "$OUT/attention_flash_verify_pack$pack.json" > "$OUT/verify_pack$pack.log" 2>&1
  echo "verify bench, pack $pack: exit $?"; grep -E "^verify" "$OUT/verify_pack$pack.log"
done
PAGODA_FLASH_PACK_GQA=1 timeout 150 python3 benchmarks/attention_flash.py --quick --out "$OUT/attention_flash_pack1.json" \
  > "$OUT/bench_pack1.log" 2>&1
echo "kernel bench, packed prefill: exit $?"; grep -E "^prefill" "$OUT/bench_pack1.log"
