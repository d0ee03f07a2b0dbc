#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: the flash decode kernel requesting the keys of
# earlier steps before it waits for the KV write (PAGODA_FLASH_EARLY_KEYS=1, new, off until measured), so
# that their reads overlap the rotary and KV write instead of queueing behind the o GEMV's early reads.
#   1. GPU tests: the flash kernels with and without it (test_flash_gpu_kernels.py; this step's slots are NaN
#      until its KV write), then the flash end-to-end tests with it (greedy tokens equal to triton's);
#   2. `pagoda bench latency` 8B batch 1, PAIRS (2) rounds of TP=2 then TP=1: flash, flash with early keys,
#      and (first round) triton, main's figures so far; no run starts after 530 s.
# About 9 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/early_keys.sh
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh early_keys
export PAGODA_REQUIRE_FLASH=1
tests() {  # NAME ENV PYTEST_ARGS...
  env $2 timeout 150 python3 -m pytest -q -p no:cacheprovider "${@:3}" > "$R/$1.log" 2>&1
  echo "$1: exit $? ($(tail -1 "$R/$1.log"))" | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)" "$R/$1.log" | head | tee -a "$OUT/summary.txt"
}
tests flash_kernels "" plugins/attention_flash/tests/test_flash_gpu_kernels.py \
  -k "early or split_kv or decode_only or replay or short_queries"
tests flash_e2e_early PAGODA_FLASH_EARLY_KEYS=1 plugins/attention_flash/tests/test_flash_end_to_end.py
LAT_TRITON=("${LAT[@]}") LAT_FLASH=("${LAT[@]/triton/flash}")
for pair in $(seq "${PAIRS:-2}"); do
  for tp in 2 1; do
    [ "$SECONDS" -lt 530 ] || break 2
    LAT=("${LAT_FLASH[@]}")
    bench_latency "latency_p${pair}_tp${tp}_flash" "$M8" $tp ""
    bench_latency "latency_p${pair}_tp${tp}_early" "$M8" $tp "PAGODA_FLASH_EARLY_KEYS=1"
    LAT=("${LAT_TRITON[@]}")
    [ "$pair" = 1 ] && bench_latency "latency_p${pair}_tp${tp}_triton" "$M8" $tp ""
  done
done | tee -a "$OUT/summary.txt"
pack_results
