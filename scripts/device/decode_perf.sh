#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): the decode path end to end on dummy
# Llama-3.1-8B weights — graph tests and replay-vs-eager checks, where a step's time goes
# (profile_decode.py), `pagoda bench latency`, and the Triton attention benchmark. -> $OUT
#   PARTS="tests profile latency attention" bash scripts/device/decode_perf.sh
set -uo pipefail
OUT="${OUT:-$PWD/decode_perf_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PARTS="${PARTS:-tests profile latency attention}"
MODEL=benchmarks/configs/llama-3.1-8b
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$OUT/install.log" 2>&1 \
  || { tail -40 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
has() { [[ " $PARTS " == *" $1 "* ]]; }
if has tests; then
  TESTS="${TESTS:-plugins/platform_cuda/tests/test_cuda_graphs.py tests/engine/test_decode_graphs.py plugins/attention_triton/tests}"
  timeout 300 python3 -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -6
  timeout 240 python3 scripts/device/check_graphs.py 48 2>&1 | tail -4
fi
if has profile; then
  timeout 240 python3 scripts/device/profile_decode.py "$MODEL" --batch 1 --out "$OUT" > "$OUT/profile_b1.log" 2>&1
  echo "profile: exit $?"; grep -E '"(step_ms|replay_ms|replay_launch_us|logits_argmax_ms|host_gap_ms)"' "$OUT/profile_b1.log"
  gzip -f "$OUT"/trace_b*.json 2>/dev/null
fi
if has latency; then
  timeout 240 pagoda bench latency "$MODEL" --load-format dummy --attention-backend triton --max-model-len 2048 \
    --batch-sizes 1,8,64 --input-len 128 --output-len 32 --repeats 3 --result-file "$OUT/latency_graphs.json" \
    > "$OUT/latency.log" 2>&1; echo "latency: exit $?"
  grep -E '"(batch|step_ms|floor_ms|ratio_to_floor|read_gbps)"' "$OUT/latency_graphs.json"
fi
if has attention; then
  timeout 420 python3 benchmarks/attention_triton.py ${ATTN_FLAGS:---focus} --out "$OUT/attention_triton.json" 2>&1 \
    | tee "$OUT/attention.log" | grep -vi warn
fi
