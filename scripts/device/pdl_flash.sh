#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), one call of about 9 minutes:
#  - AWQ: the GPU tests (the overlapped-launch test among them), the tiles kernel against bf16 with
#    programmatic dependent launch on and off (PAGODA_PDL), batch-1 decode latency of dummy AWQ
#    Llama-3.1-8B with it on and off, and bf16;
#  - flash: the GPU tests, decode bandwidth against the split count with the backend's plan, Nsight
#    Compute on the decode kernel, end-to-end flash vs triton (300 x 1024/128).
# Results: summary.txt, quant_awq_pdl{1,0}.json, flash_splits.json, and logs.tgz (every log).
set -uo pipefail
OUT="${OUT:-$PWD/pdl_flash_out}"; mkdir -p "$OUT"
LOGS=/tmp/pdl_flash_logs; mkdir -p "$LOGS"
trap 'tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash \
  plugins/quant_awq > "$LOGS/install.log" 2>&1 || { tail -40 "$LOGS/install.log"; exit 1; }
say "install: $(( $(date +%s) - start )) s; $(nvidia-smi --query-gpu=name --format=csv,noheader)"

timeout 150 python3 -m pytest -q -p no:cacheprovider -rs plugins/quant_awq/tests -k "not compile" > "$LOGS/awq_tests.log" 2>&1
say "awq tests: exit $? ($(tail -1 "$LOGS/awq_tests.log"))"; grep -E "^(FAILED|ERROR)" "$LOGS/awq_tests.log" | head -10
for pdl in 1 0; do
  PAGODA_PDL=$pdl timeout 100 python3 benchmarks/quant_awq.py --kernels tiles --tokens 1,4,8,16 \
    --out "$OUT/quant_awq_pdl$pdl.json" > "$LOGS/bench_pdl$pdl.log" 2>&1
  say "awq bench PDL=$pdl: exit $?"; grep -A6 "^M " "$LOGS/bench_pdl$pdl.log" | tee -a "$OUT/summary.txt"
done
LAT=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
     --input-len 128 --output-len 32 --repeats 2 --log-level warning)
for run in awq_pdl1 awq_pdl0 bf16; do
  config=benchmarks/configs/llama-3.1-8b-awq; [ $run = bf16 ] && config=benchmarks/configs/llama-3.1-8b
  pdl=${run#awq_pdl}; [ $run = bf16 ] && pdl=1
  PAGODA_PDL=$pdl timeout 70 pagoda bench latency "$config" "${LAT[@]}" --result-file "$LOGS/latency_$run.json" \
    > "$LOGS/latency_$run.log" 2>&1
  say "latency $run: exit $? $(python3 scripts/device/summarize_bench.py "$LOGS/latency_$run.json" 2>/dev/null)"
done

timeout 200 python3 -m pytest -q -p no:cacheprovider -rs plugins/attention_flash/tests > "$LOGS/flash_tests.log" 2>&1
say "flash tests: exit $? ($(tail -1 "$LOGS/flash_tests.log"))"; grep -E "^(FAILED|ERROR)" "$LOGS/flash_tests.log" | head -10
python3 -c "from pagoda_attention_flash.kernels import decode_programs_per_sm as p; import torch; print('flash decode programs per SM (d64, d128, d256):', [p(d, torch.bfloat16) for d in (64, 128, 256)])" 2>&1 | tee -a "$OUT/summary.txt"
timeout 150 python3 scripts/device/flash_splits.py --out "$OUT/flash_splits.json" > "$LOGS/flash_splits.log" 2>&1
say "flash splits: exit $?"; cat "$LOGS/flash_splits.log" >> "$OUT/summary.txt"
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats
          --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters)
for shape in "64 4096 1" "1 32768 32"; do
  timeout 60 ncu --clock-control none "${SECTIONS[@]}" -k regex:flash_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 scripts/device/flash_splits.py --once $shape > "$LOGS/ncu_flash_${shape// /_}.txt" 2>&1
  say "ncu flash $shape: exit $?"
done
for backend in flash triton; do
  timeout 100 pagoda bench throughput benchmarks/configs/llama-3.1-8b --load-format dummy --attention-backend "$backend" \
    --max-model-len 2048 --num-prompts 300 --input-len 1024 --output-len 128 --log-level warning \
    --result-file "$LOGS/throughput_$backend.json" > "$LOGS/throughput_$backend.log" 2>&1
  say "e2e $backend: exit $? $(python3 scripts/device/summarize_bench.py "$LOGS/throughput_$backend.json" 2>/dev/null)"
done
say "total: $(( $(date +%s) - start )) s"
