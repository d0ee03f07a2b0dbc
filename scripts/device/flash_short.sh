#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]), issue 12: flash's verify-sized steps on its decode kernel.
#   1. the flash GPU tests of short queries and the split plans (PAGODA_REQUIRE_FLASH=1);
#   2. scripts/device/attention_host_cost.py: host microseconds a layer call, flash against triton;
#   3. `pagoda serve --attention-backend flash` + `pagoda bench serve` (500 x 256/256).
# About 5 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/flash_short.sh
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh flash_short
PAGODA_REQUIRE_FLASH=1 timeout 200 python3 -m pytest -q -p no:cacheprovider plugins/attention_flash/tests \
  -k "short or split_plan or verify" > "$R/tests.log" 2>&1
echo "flash tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
grep -E "^(FAILED|ERROR)" "$R/tests.log" | head | tee -a "$OUT/summary.txt"
timeout 120 python3 scripts/device/attention_host_cost.py > "$R/host_cost.log" 2>&1
echo "host cost: exit $?"; grep -E "host a layer call" "$R/host_cost.log" | tee -a "$OUT/summary.txt"
source scripts/device/serve_bench.sh
OUT="$R" serve_bench flash serve_flash | tee -a "$OUT/summary.txt"
pack_results
