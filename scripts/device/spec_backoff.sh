#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): speculation's cost-aware back-off end to end
# (scripts/device/spec_backoff.py): dummy SmolLM2-135M and Llama-3.1-8B, n-gram (k = 4) against
# none, batch 1 and 8, one process per model and mode; prints ngram / none per batch. -> $OUT
#   bash scripts/device/spec_backoff.sh        # ARGS="--models smollm2-135m --rounds 2": more arguments
#   REUSE_INSTALL=1: skip the install where a call before it on this warm machine installed into /tmp/site
# The install builds the CUDA kernels first (2-3 minutes on a fresh machine); the benchmark itself
# takes about 2-3 minutes (LIMIT caps it, default 300 s).
set -uo pipefail
OUT="${OUT:-$PWD/spec_backoff_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if [ -n "${REUSE_INSTALL:-}" ] && [ -d /tmp/site/pagoda_platform_cuda ]; then  # installed by a call before, same machine
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
elif [ -z "${SKIP_INSTALL:-}" ]; then  # SKIP_INSTALL=1: the pagoda already importable (a CPU try)
  rm -rf plugins/*/build plugins/*/*.egg-info
  source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$OUT/install.log" 2>&1 \
    || { tail -40 "$OUT/install.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | tee "$OUT/device.txt"
timeout "${LIMIT:-300}" python3 scripts/device/spec_backoff.py --attention-backend "${BACKEND:-triton}" \
  --out "$OUT" ${ARGS:-} 2>&1 | grep -v -E "Loading|Capturing|it/s\]" | tee "$OUT/spec_backoff.log"
