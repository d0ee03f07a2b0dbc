#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), about 7 minutes: batch-1 decode latency of dummy
# AWQ Llama-3.1-8B with programmatic dependent launch on and off (PAGODA_PDL), alternating runs; the
# flash tests; flash decode bandwidth against the split count with the backend's plan marked; flash
# vs triton end to end (300 x 1024/128). Results: summary.txt, flash_splits.json, logs.tgz.
set -uo pipefail
OUT="${OUT:-$PWD/pdl_ab_out}"; mkdir -p "$OUT"
LOGS=/tmp/pdl_ab_logs; mkdir -p "$LOGS"
trap 'tar -czf "$OUT/logs.tgz" -C "$LOGS" . 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
say() { echo "$@" | tee -a "$OUT/summary.txt"; }
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash \
  plugins/quant_awq > "$LOGS/install.log" 2>&1 || { tail -40 "$LOGS/install.log"; exit 1; }
say "install: $(( $(date +%s) - start )) s; $(nvidia-smi --query-gpu=name --format=csv,noheader)"
LAT=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
     --input-len 128 --output-len 64 --repeats 3 --log-level warning)
for i in 1 2 3; do
  for pdl in 1 0; do
    PAGODA_PDL=$pdl timeout 70 pagoda bench latency benchmarks/configs/llama-3.1-8b-awq "${LAT[@]}" \
      --result-file "$LOGS/latency_pdl${pdl}_$i.json" > "$LOGS/latency_pdl${pdl}_$i.log" 2>&1
    say "latency awq PDL=$pdl run $i: exit $? $(python3 scripts/device/summarize_bench.py "$LOGS/latency_pdl${pdl}_$i.json" 2>/dev/null)"
  done
done
timeout 200 python3 -m pytest -q -p no:cacheprovider -rs plugins/attention_flash/tests > "$LOGS/flash_tests.log" 2>&1
say "flash tests: exit $? ($(tail -1 "$LOGS/flash_tests.log"))"; grep -E "^(FAILED|ERROR)" "$LOGS/flash_tests.log" | head -10
timeout 150 python3 scripts/device/flash_splits.py --out "$OUT/flash_splits.json" > "$LOGS/flash_splits.log" 2>&1
say "flash splits: exit $?"; grep -E "plans|b  64" "$LOGS/flash_splits.log" >> "$OUT/summary.txt"
for backend in flash triton flash triton; do
  timeout 100 pagoda bench throughput benchmarks/configs/llama-3.1-8b --load-format dummy --attention-backend "$backend" \
    --max-model-len 2048 --num-prompts 300 --input-len 1024 --output-len 128 --log-level warning \
    --result-file "$LOGS/throughput_$backend.json" > "$LOGS/throughput_$backend.log" 2>&1
  say "e2e $backend: exit $? $(python3 scripts/device/summarize_bench.py "$LOGS/throughput_$backend.json" 2>/dev/null)"
done
say "total: $(( $(date +%s) - start )) s"
