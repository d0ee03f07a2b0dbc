#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), from the repo root: install the wheels, pagoda
# and pagoda-platform-cuda (its csrc kernels build ahead of time here), run the gpu-marked tests
# and the kernel benchmark. Logs and results go under $OUT (or ./gpu_suite_out).
#   bash scripts/device/gpu_suite.sh
set -uo pipefail
OUT="${OUT:-$PWD/gpu_suite_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/device.txt"
rm -rf plugins/platform_cuda/build plugins/platform_cuda/*.egg-info  # stale outputs of earlier runs
start=$(date +%s)
source scripts/device/install_wheels.sh plugins/platform_cuda > "$OUT/install.log" 2>&1 || { tail -40 "$OUT/install.log"; exit 1; }
echo "install + ahead-of-time kernel build: $(( $(date +%s) - start )) s"
python3 -c "import torch, pagoda_platform_cuda._C as c; print('prebuilt kernels:', c.__file__)" 2>&1 | tee -a "$OUT/device.txt"
python3 -m pytest -v -p no:cacheprovider -rs plugins/platform_cuda/tests 2>&1 | tee "$OUT/pytest_gpu.log" | grep -v PASSED | tail -25
grep -E "test_cuda_engine.py|test_platform_cuda_plugin.py" "$OUT/pytest_gpu.log"
python3 plugins/platform_cuda/benchmarks/bench_kernels.py --out "$OUT/gpu_kernels.txt" 2>&1 | tail -15
