#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), from the repo root, after
#   source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash
# (installs them itself if that was not done): load or build the flash kernels
# (pagoda_platform_cuda._flash), run the flash gpu tests (printing the error of every case),
# compute-sanitizer memcheck + racecheck on a small case, and the flash benchmark.
# Every part has its own timeout; results and logs go under $OUT; a summary ends the output.
#   bash scripts/device/flash.sh
set -uo pipefail
OUT="${OUT:-$PWD/flash_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
declare -A STATUS
step() {  # step NAME SECONDS CMD...: run under a timeout, remember "exit code, seconds"
  local name=$1 limit=$2; shift 2; local t0; t0=$(date +%s)
  timeout "$limit" "$@"; local rc=$?
  STATUS[$name]="exit $rc$([ $rc = 124 ] && echo ' (timeout)'), $(( $(date +%s) - t0 )) s"; echo "== $name: ${STATUS[$name]}"; return $rc
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
if ! python3 -c "import pagoda_attention_flash, pagoda_attention_triton, pagoda_platform_cuda" 2>/dev/null; then
  rm -rf plugins/*/build plugins/*/*.egg-info  # stale outputs of earlier runs
  t0=$(date +%s)
  timeout 300 bash -c "source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash" \
    > "$OUT/install.log" 2>&1 || tail -30 "$OUT/install.log"
  STATUS[install]="$(( $(date +%s) - t0 )) s"
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
  grep -iE "deferring|error" "$OUT/install.log" | head -10
fi
# the kernels: prebuilt at install, or compiled now (first use); the reason if neither works
step kernels 300 python3 -c "
import torch
from pagoda_platform_cuda.build import load_flash_extension
print('flash kernels:', load_flash_extension().__file__)" 2>&1 | tail -20 | tee -a "$OUT/device.txt"

T=plugins/attention_flash/tests
step kernel_tests 120 python3 -m pytest -q -s -p no:cacheprovider -rs "$T/test_flash_gpu.py" "$T/test_flash_backend.py" \
  "$T/test_attention_flash_plugin.py" > "$OUT/pytest_kernels.log" 2>&1
grep -oE "FLASHERR .*|FAILED .*|[A-Za-z]*Error.*" "$OUT/pytest_kernels.log" | head -70; tail -2 "$OUT/pytest_kernels.log"
step e2e_tests 120 python3 -m pytest -q -s -p no:cacheprovider -rs "$T/test_flash_end_to_end.py" > "$OUT/pytest_e2e.log" 2>&1
grep -oE "FLASHERR .*|FAILED .*|[A-Za-z]*Error.*" "$OUT/pytest_e2e.log" | head -20; tail -2 "$OUT/pytest_e2e.log"

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$SAN" ]; then
  for tool in memcheck racecheck; do
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 step "sanitizer_$tool" 90 "$SAN" --tool "$tool" --error-exitcode 9 \
      --print-limit 20 python3 scripts/device/flash_small_case.py > "$OUT/sanitizer_$tool.log" 2>&1
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|small case|Invalid|Race|hazard|rror" "$OUT/sanitizer_$tool.log" | head -12
  done
else
  STATUS[sanitizer]="compute-sanitizer not found"
fi

step benchmark 110 python3 benchmarks/attention_flash.py --out "$OUT/attention_flash.json" > "$OUT/bench.log" 2>&1
tail -3 "$OUT/bench.log"

echo; echo "==== flash summary: $(head -1 "$OUT/device.txt")"
for k in install kernels kernel_tests e2e_tests sanitizer_memcheck sanitizer_racecheck sanitizer benchmark; do
  [ -n "${STATUS[$k]:-}" ] && printf "%-20s %s\n" "$k" "${STATUS[$k]}"; done
for f in pytest_kernels pytest_e2e; do echo "$f: $(grep -E "passed|failed|error" "$OUT/$f.log" | tail -1)"; done
echo "largest errors (rel L2; bounds bf16 1e-2, fp16 2e-3):"
grep -ohE "FLASHERR .* rel=.*" "$OUT"/pytest_kernels.log | awk '{print $3, $2, $4}' | sort -t= -k2,2 -g -r | head -6
grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT"/sanitizer_*.log 2>/dev/null
grep -E "^device|^prefill seq|^decode b" "$OUT/bench.log" | head -24
