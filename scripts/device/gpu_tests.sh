#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): every gpu-marked test of core and the plugins, with flash
# installed, so that `auto` picks flash wherever a test does not name a backend (flash became auto's
# choice on 2026-11-27), and the flash plugin's own suite with PAGODA_REQUIRE_FLASH=1. Tests needing two
# GPUs skip here (run scripts/device/tp.sh on nvidia-h200-x2 for those).
# About 8 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/gpu_tests.sh
#   SUITES=tests bash scripts/device/gpu_tests.sh     (only the named suites)
EXTRA_PLUGINS=plugins/attention_flash source scripts/device/begin_cuda.sh gpu_tests
for suite in ${SUITES:-tests plugins/platform_cuda/tests plugins/attention_flash/tests plugins/attention_triton/tests}; do
  name=$(echo "$suite" | tr / _)
  PAGODA_REQUIRE_FLASH=1 timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu -rfE --durations=10 "$suite" \
    > "$R/$name.log" 2>&1
  echo "$suite: exit $? ($(tail -1 "$R/$name.log"))" | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)" "$R/$name.log" | head -15 | tee -a "$OUT/summary.txt"
done
pack_results
