#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): end-to-end benchmarks with the CUDA platform
# and the Triton backend on dummy Llama-3.1-8B weights. Results (JSON) go under $OUT.
#   bash scripts/device/bench_e2e.sh
set -uo pipefail
OUT="${OUT:-$PWD/bench_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$OUT/install.log" 2>&1 \
  || { tail -40 "$OUT/install.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
MODEL=benchmarks/configs/llama-3.1-8b
COMMON=(--load-format dummy --attention-backend triton --max-model-len 2048 --log-level warning ${EXTRA_FLAGS:-})
bench() { local name=$1; shift; timeout "${LIMIT:-240}" pagoda bench "$@" "${COMMON[@]}" --result-file "$OUT/$name.json" \
  > "$OUT/$name.log" 2>&1; echo "$name: exit $?"; grep -E '"(requests_per_s|tokens_per_s|output_tokens_per_s|ratio_pagoda_over_hf|step_ms|ratio_to_floor|batch)"' "$OUT/$name.json" 2>/dev/null || tail -5 "$OUT/$name.log"; }
if [ -n "${GRAPHS:-}" ]; then  # CUDA-graph tests, then decode latency and throughput (graphs are the default)
  python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests/test_cuda_graphs.py tests/engine/test_decode_graphs.py 2>&1 | tail -15
  bench latency_graphs latency "$MODEL" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --repeats 2
  bench throughput_graphs_256x256 throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256
  bench throughput_graphs_1024x128 throughput "$MODEL" --num-prompts 1000 --input-len 1024 --output-len 128
  exit 0
fi
if [ -n "${BACKENDS:-}" ]; then  # the Triton backend against the torch reference, same workload
  for backend in triton torch; do
    COMMON=(--load-format dummy --attention-backend "$backend" --max-model-len 2048 --log-level warning)
    bench "backend_${backend}_200x256x256" throughput "$MODEL" --num-prompts 200 --input-len 256 --output-len 256
  done
  exit 0
fi
[ -n "${ONLY_HF:-}" ] || {
bench throughput_256x256 throughput "$MODEL" --num-prompts 1000 --input-len 256 --output-len 256
bench latency latency "$MODEL" --batch-sizes 1,8,64 --input-len 128 --output-len 32 --repeats 2
bench throughput_1024x128 throughput "$MODEL" --num-prompts 1000 --input-len 1024 --output-len 128
}
# HF needs room for its own copy of the weights and its paged cache: Pagoda takes less memory here
LIMIT=300 bench hf_200x256x256 throughput "$MODEL" --num-prompts 200 --input-len 256 --output-len 256 --hf \
  --gpu-memory-utilization 0.45
