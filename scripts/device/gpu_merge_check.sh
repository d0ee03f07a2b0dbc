#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): every gpu-marked test of the CUDA platform, the
# Triton attention and the two quantization plugins, after the csrc restructure (csrc/kernels +
# torch layer, manifest) and the new kernels landed together. Log under $OUT.
#   bash scripts/device/gpu_merge_check.sh
set -uo pipefail
OUT="${OUT:-$PWD/gpu_merge_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
start=$(date +%s)
rm -rf plugins/*/build plugins/*/*.egg-info
source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton plugins/quant_awq plugins/quant_fp8 \
  > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
echo "install + ahead-of-time kernel build: $(( $(date +%s) - start )) s"
python3 -c "import torch, pagoda_platform_cuda._C as c; print('prebuilt kernels:', c.__file__, [n for n in dir(c) if not n.startswith('_')])"
timeout "${LIMIT:-420}" python3 -m pytest -q -p no:cacheprovider -rf -m gpu ${TESTS:-plugins/platform_cuda/tests \
  plugins/attention_triton/tests plugins/quant_awq/tests plugins/quant_fp8/tests tests/engine/test_decode_graphs.py} \
  2>&1 | tee "$OUT/pytest_gpu.log" | grep -E "passed|failed|FAILED|Error" | tail -25
echo "total: $(( $(date +%s) - start )) s"
