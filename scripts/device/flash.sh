#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), from the repo root: build and install
# pagoda-platform-cuda (csrc, with csrc/attention), -attention-triton and -attention-flash into
# /tmp/site, then the flash GPU tests, compute-sanitizer memcheck and racecheck on a small case, and
# the kernel benchmark (flash vs triton vs torch SDPA flash; Llama-3.1-8B heads). Results and logs
# under $OUT, each step under a timeout, the whole script under 9 minutes.
#   bash scripts/device/flash.sh
#   PARTS=tests bash scripts/device/flash.sh       (parts: tests, sanitize, variants, ncu, bench, e2e; default
#                                                   tests,sanitize,bench)
# variants: prefill TFLOP/s of each run-time kernel variant against SDPA flash (scripts/device/flash_variants.py,
# about a minute); ncu: Nsight Compute sections of one 16k-token prefill launch (about a minute, if ncu exists).
#   BENCH_ARGS=--quick ...                         fewer benchmark shapes
# e2e: `pagoda bench throughput` (E2E_PROMPTS x 1024/128, default 300) on dummy Llama-3.1-8B with flash and with
# triton, E2E_ROUNDS times (about 1.5 minutes a round).
set -uo pipefail
PARTS="${PARTS:-tests,sanitize,bench}"
BENCH_ARGS="${BENCH_ARGS:-}"
OUT="${OUT:-$PWD/flash_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
BUDGET=530  # seconds for the whole script (9 minutes minus a margin)
limit() {  # limit CAP: the smaller of CAP and the time left (0 when under 20 s are left)
  local left=$((BUDGET - SECONDS)); (( left < 20 )) && { echo 0; return; }
  (( left < $1 )) && echo "$left" || echo "$1"
}
step() {  # step NAME CAP CMD...: run CMD under `timeout`, log to $OUT/NAME.log, report the exit status
  local name=$1 cap; cap=$(limit "$2"); shift 2
  if [[ "$cap" == 0 ]]; then echo "$name: skipped (time budget)"; return 0; fi
  timeout "$cap" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name: exit $rc$([[ $rc == 124 ]] && echo " (timed out after ${cap}s)")"
  return $rc
}

rm -rf plugins/*/build plugins/*/*.egg-info
step install 330 bash -c "source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash" \
  || { tail -40 "$OUT/install.log"; exit 1; }
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
grep -iE "error|deferring" "$OUT/install.log" | head -20
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  nvcc --version 2>/dev/null | tail -1
  timeout 240 python3 -c "
from pagoda_attention_flash.kernels import extension
ext, reason = extension()
print('flash kernels:', 'built' if ext is not None else 'UNAVAILABLE: ' + reason)"
} 2>&1 | tee "$OUT/device.txt"

if [[ ",$PARTS," == *",tests,"* ]]; then
  step tests 240 env PAGODA_REQUIRE_FLASH=1 python3 -m pytest -q -p no:cacheprovider -rs plugins/attention_flash/tests
  grep -E "passed|failed|error" "$OUT/tests.log" | tail -3
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -20
fi

if [[ ",$PARTS," == *",sanitize,"* ]]; then
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
  if [[ -z "$SAN" ]]; then
    echo "sanitize: compute-sanitizer not found"
  else
    FILTER=(); "$SAN" --help 2>&1 | grep -q -- "--kernel-name" && FILTER=(--kernel-name kns=flash)
    for tool in memcheck racecheck; do
      step "$tool" 150 "$SAN" --tool "$tool" "${FILTER[@]}" --error-exitcode 3 python3 scripts/device/flash_case.py
      grep -E "ERROR SUMMARY|RACECHECK SUMMARY|rel error|Error|hazard" "$OUT/$tool.log" | head -12
    done
  fi
fi

if [[ ",$PARTS," == *",variants,"* ]]; then  # prefill TFLOP/s per run-time variant (scripts/device/flash_variants.py)
  step variants 150 python3 scripts/device/flash_variants.py --out "$OUT/flash_variants.json"
  grep -E "^variant|failed" "$OUT/variants.log"
fi

if [[ ",$PARTS," == *",ncu,"* ]]; then  # Nsight Compute on one 16k-token prefill launch: stalls, issue, occupancy
  NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [[ -z "$NCU" ]]; then
    echo "ncu: not found"
  else
    step ncu 120 "$NCU" --kernel-name regex:flash_prefill_kernel --launch-skip 2 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats \
      --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
      --section MemoryWorkloadAnalysis python3 scripts/device/flash_variants.py --profile
    grep -E "Duration|Throughput|Registers|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued" \
      "$OUT/ncu.log" | head -30
    grep -E "Stall|ERR|==PROF==|==ERROR==" "$OUT/ncu.log" | head -20
  fi
fi

if [[ ",$PARTS," == *",bench,"* ]]; then
  # shellcheck disable=SC2086
  step bench 200 python3 benchmarks/attention_flash.py --out "$OUT/attention_flash.json" $BENCH_ARGS
  grep -E "^(device|prefill|decode)" "$OUT/bench.log"
fi

if [[ ",$PARTS," == *",e2e,"* ]]; then  # E2E_ROUNDS rounds of flash then triton (alternating)
  for round in $(seq "${E2E_ROUNDS:-1}"); do
    for backend in flash triton; do
      step "throughput_${backend}_$round" 120 pagoda bench throughput benchmarks/configs/llama-3.1-8b --load-format dummy \
        --attention-backend "$backend" --max-model-len 2048 --num-prompts "${E2E_PROMPTS:-300}" --input-len 1024 --output-len 128 \
        --log-level warning --result-file "$OUT/throughput_${backend}_$round.json"
      python3 -c "import json, sys; p = json.load(open(sys.argv[1]))['pagoda']
print(sys.argv[2], round(p['requests_per_s'], 2), 'requests/s,', round(p['tokens_per_s']), 'tokens/s')" \
        "$OUT/throughput_${backend}_$round.json" "$backend" 2>/dev/null
    done
  done
fi
echo "total ${SECONDS}s; results in $OUT"
