#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl"]), issue 15: where the TP=2 batch-1 step's time goes,
# and its ratio to TP=1 with a spread. Llama-3.1-8B dummy bf16, Triton attention, CUDA graphs:
#   1. scripts/device/profile_decode.py at TP=1 and TP=2: step time and rank 0's kernel time per step
#      by kind (linears, LL all-reduces, NCCL, attention, norms, ...) and the device's idle time;
#   2. `pagoda bench latency` TP=1 / TP=2 alternated PAIRS times (default 2), each pair on one machine;
# (The dense GEMV at one TP=2 rank's shapes needs one GPU: benchmarks/dense_gemv.py in the one-GPU call.)
# About 7 minutes (give the call 600 s). -> $OUT (profile JSON, gzipped traces, latency JSON, summary.txt)
#   bash scripts/device/round17.sh
set -uo pipefail
OUT="${OUT:-$PWD/round17_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton; echo "install: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
M8=benchmarks/configs/llama-3.1-8b
for tp in 1 2; do
  timeout 200 python3 scripts/device/profile_decode.py "$M8" -tp "$tp" --out "$OUT" > "$OUT/profile_tp$tp.log" 2>&1
  echo "profile tp=$tp: exit $?"; python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(r['step_ms'], json.dumps(r['decode_by_kind']))" \
    "$OUT/profile_tp${tp}_b1.json" 2>/dev/null
done
gzip -f "$OUT"/trace_*.json
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level warning)
for pair in $(seq "${PAIRS:-2}"); do
  for tp in 1 2; do
    timeout 150 pagoda bench latency "$M8" "${LAT[@]}" -tp "$tp" --result-file "$OUT/latency_p${pair}_tp$tp.json" \
      > "$OUT/latency_p${pair}_tp$tp.log" 2>&1
    echo "pair $pair tp=$tp: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/latency_p${pair}_tp$tp.json" 2>/dev/null)"
  done
done | tee "$OUT/summary.txt"
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f -- *.log)
echo "total ${SECONDS} s"
