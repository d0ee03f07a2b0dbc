#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): speculative decoding's costs and end-to-end
# figures (scripts/device/spec_costs.py) with the CUDA platform and the Triton backend. -> $OUT
#   bash scripts/device/spec_costs.sh            # MODE=costs|e2e|all (default all), ARGS="--iters 100"
#   REUSE_INSTALL=1: skip the install where a call before it on this warm machine installed into /tmp/site
#   GPU_TESTS=1: also the gpu-marked speculative-decoding tests (draft rounds on CUDA graphs, verify graphs)
#   PROFILE=1: also scripts/device/profile_draft_round.py (where a 1B draft round's time goes; about 1 minute)
# The install builds the CUDA kernels first (a few minutes): if one call's 10 minutes run short,
# run MODE=costs and MODE=e2e in two calls (each installs again). On a fresh H100,
# `MODE=costs GPU_TESTS=1 LIMIT=240 bash scripts/device/spec_costs.sh` should take about 5-6 minutes
# (install 2-3, gpu tests under 1, costs about 2; LIMIT caps the costs part).
set -uo pipefail
OUT="${OUT:-$PWD/spec_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
if [ -n "${REUSE_INSTALL:-}" ] && [ -d /tmp/site/pagoda_platform_cuda ]; then  # installed by a call before, same machine
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
else
  rm -rf plugins/*/build plugins/*/*.egg-info
  source scripts/device/install_wheels.sh plugins/platform_cuda plugins/attention_triton > "$OUT/install.log" 2>&1 \
    || { tail -40 "$OUT/install.log"; exit 1; }
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [ -n "${CHECK:-}" ]; then  # verify-graph replays against eager forwards on the 8B config
  timeout 300 python3 scripts/device/check_verify_graphs.py 2>&1 | tail -8
fi
if [ -n "${GPU_TESTS:-}" ]; then
  timeout 300 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/engine/test_speculative_draft_chain.py \
    tests/engine/test_speculative_draft.py 2>&1 | tee "$OUT/spec_gpu_tests.log" | tail -15
fi
timeout "${LIMIT:-480}" python3 scripts/device/spec_costs.py --mode "${MODE:-all}" --attention-backend triton \
  --out "$OUT" ${ARGS:-} 2>&1 | grep -v -E "Loading|Capturing|it/s\]" | tee "$OUT/spec_costs.log"
if [ -n "${PROFILE:-}" ]; then
  timeout 240 python3 scripts/device/profile_draft_round.py --attention-backend triton --out "$OUT" 2>&1 \
    | grep -v -E "Loading|Capturing|it/s\]" > "$OUT/draft_round.log"
  echo "draft round profile: exit $?"; head -30 "$OUT/draft_round.log"
fi
