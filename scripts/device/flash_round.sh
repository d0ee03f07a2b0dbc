#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), one call of at most 9.5 minutes, after a change to
# the flash decode kernel. Parts (PARTS, comma-separated; flash.sh's own: tests, sanitize, bench, e2e):
#   sweep   flash_splits.py (SWEEP_ARGS, e.g. "--batches 1")
#   mixed   profile_mixed.py with flash and with triton: a 256-token prompt joining 0-128 decodes, step
#           times and GPU time by kernel kind (where an end-to-end difference between them comes from)
#   pdl_ab  batch-1 split sweeps with PAGODA_PDL=0, =1, =0, =1 (the reduction as a programmatic dependent)
#   ncu_decode Nsight Compute sections of the batch-1 x 32k decode and reduction kernels
#   serve   `pagoda serve` dummy Llama-3.1-8B on the flash backend + `pagoda bench serve`
# Results under $OUT (tests.log, attention_flash.json, flash_splits.json, ncu_flash.txt, serve_*.json),
# the logs also in $OUT/logs.tgz (the run tool brings back 8 files at most).
set -uo pipefail
OUT="${OUT:-$PWD/flash_round_out}"; mkdir -p "$OUT"
PARTS="${PARTS:-tests,sanitize,bench,sweep,ncu_decode}"
has() { [[ ",$PARTS," == *",$1,"* ]]; }
PARTS="$PARTS" OUT="$OUT" bash scripts/device/flash.sh  # installs, then runs its own parts of PARTS
export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
if has sweep; then
  # shellcheck disable=SC2086
  timeout 150 python3 scripts/device/flash_splits.py ${SWEEP_ARGS:-} --out "$OUT/flash_splits.json" > "$OUT/flash_splits.log" 2>&1
  echo "flash splits: exit $?"; grep -v '^b .* plans' "$OUT/flash_splits.log"
fi
if has mixed; then
  for backend in flash triton; do
    timeout 150 python3 scripts/device/profile_mixed.py benchmarks/configs/llama-3.1-8b --backend "$backend" \
      --decodes 0,32,128 --profile-decodes 128 --out "$OUT/mixed_$backend" > "$OUT/mixed_$backend.log" 2>&1
    echo "mixed steps, $backend: exit $?"; tail -4 "$OUT/mixed_$backend.log"
  done
fi
if has pdl_ab; then
  for pdl in 0 1 0 1; do
    PAGODA_PDL=$pdl timeout 60 python3 scripts/device/flash_splits.py --batches 1 --out "$OUT/pdl_ab_$pdl.json" \
      > "$OUT/pdl_ab_$pdl.log" 2>&1
    echo "PAGODA_PDL=$pdl: exit $?"; grep -E "flash  splits  (16|32)|triton" "$OUT/pdl_ab_$pdl.log"
  done
fi
if has ncu_decode; then
  timeout 60 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section SchedulerStats --section WarpStateStats --section InstructionStats -k regex:flash_decode \
    --launch-skip 4 --launch-count 2 python3 scripts/device/flash_splits.py --once 1 32768 32 > "$OUT/ncu_flash.txt" 2>&1
  echo "ncu flash: exit $?"
  grep -E "Duration|DRAM Throughput|Issued Warp|Warp Cycles Per Issued|Executed Instructions  |Registers Per" "$OUT/ncu_flash.txt"
fi
if has serve; then
  source scripts/device/serve_bench.sh
  serve_bench flash serve_flash
fi
tar czf "$OUT/logs.tgz" -C "$OUT" --exclude logs.tgz . 2>/dev/null
echo "total ${SECONDS}s"
