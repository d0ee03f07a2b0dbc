#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): the torch layer built by the host compiler (csrc/*_kernels.cpp)
# instead of nvcc's host pass, which turned failed checks that format an integer into a SIGSEGV:
#   1. check_errors.py (each bad call in a child process: all must raise, none crash);
#   2. the GPU tests of every binding: dense GEMV, masked embedding, csrc kernels, flash, AWQ tiles;
#   3. `pagoda bench latency` Llama-3.1-8B batch 1 (TP=1), and `pagoda serve` + `pagoda bench serve`.
# About 6 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/host_layer_check.sh
set -uo pipefail
OUT="${OUT:-$PWD/host_layer_out}"; R="$OUT/r"; mkdir -p "$R"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash \
  plugins/quant_awq; echo "install: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
{
  timeout 60 python3 scripts/device/check_errors.py 2>&1 | grep -E "^(raised|FAILED)"
  P=plugins/platform_cuda/tests
  timeout 240 python3 -m pytest -q -p no:cacheprovider $P/test_dense_gemv.py $P/test_cuda_masked_embedding.py \
    $P/test_cuda_kernels.py plugins/attention_flash/tests/test_flash_gpu_kernels.py \
    plugins/quant_awq/tests/test_awq_gpu_kernels.py > "$R/tests.log" 2>&1
  echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))"; grep -E "^(FAILED|ERROR)" "$R/tests.log" | head
  timeout 120 pagoda bench latency benchmarks/configs/llama-3.1-8b --batch-sizes 1 --input-len 128 --output-len 128 \
    --repeats 2 --load-format dummy --attention-backend triton --max-model-len 2048 --log-level warning \
    --result-file "$R/latency_tp1.json" > "$R/latency_tp1.log" 2>&1
  echo "latency tp=1: exit $? $(python3 scripts/device/summarize_bench.py "$R/latency_tp1.json" 2>/dev/null)"
  source scripts/device/serve_bench.sh
  OUT="$R" serve_bench triton serve_triton
} 2>&1 | tee "$OUT/summary.txt"
(cd "$OUT" && tar czf results.tgz r && rm -rf r)
echo "total ${SECONDS} s"
