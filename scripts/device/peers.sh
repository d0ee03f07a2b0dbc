#!/usr/bin/env bash
# THERE (the GPU machine, tool `run`, carry [".whl"]): Pagoda and vLLM 0.26 side by side
# (benchmarks/peers/README.md). vLLM must be installed first (scripts/device/vllm_install.sh, one call
# per .vllmN part); Pagoda is installed here once per machine (skipped while its sources are unchanged).
#   PARTS=none bash scripts/device/peers.sh                       # install Pagoda only (~ the csrc build)
#   PARTS=offline bash scripts/device/peers.sh                    # ~7 min
#   PARTS=serve bash scripts/device/peers.sh                      # ~8 min (pagoda bench serve client)
#   PARTS=serve_vllm_client,prefix bash scripts/device/peers.sh   # ~8 min (vllm bench serve client + prefix)
# Extra run.py flags go in PEERS_FLAGS (e.g. "--quick", "--rates inf,8", "--match-limits",
# "--vllm-flag=--attention-backend=TRITON_ATTN"). Results: $OUT/peers_<parts>.json, .png, _logs.txt.
set -uo pipefail
START=$SECONDS
OUT="${OUT:-$PWD/peers_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PARTS="${PARTS:-offline}"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)
sources_hash() {
  find core "${PLUGINS[@]}" csrc pyproject.toml -type f \
    \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.h' -o -name '*.toml' \) \
    2>/dev/null | sort | xargs sha1sum | sha1sum | cut -d' ' -f1
}
hash=$(sources_hash)
if [ "$(cat /tmp/site/.pagoda_sources 2>/dev/null)" = "$hash" ]; then
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"
  echo "Pagoda already installed in /tmp/site (sources unchanged)"
else
  rm -rf plugins/*/build plugins/*/*.egg-info
  source scripts/device/install_wheels.sh "${PLUGINS[@]}" > "$OUT/install.log" 2>&1 \
    || { tail -40 "$OUT/install.log"; exit 1; }
  echo "$hash" > /tmp/site/.pagoda_sources
  echo "installed Pagoda into /tmp/site in $((SECONDS - START)) s"
fi
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
[ "$PARTS" = none ] && exit 0
if [[ "${PEERS_FLAGS:-}" != *"--engines pagoda"* ]] && [ ! -f /tmp/vllm_site/.installed ]; then
  echo "vLLM is not installed on this machine: carry each .vllmN with scripts/device/vllm_install.sh first"; exit 1
fi
budget=$((${CALL_LIMIT_S:-590} - (SECONDS - START) - 25))  # leave time to write the results
# shellcheck disable=SC2086
timeout $((budget + 20)) python3 benchmarks/peers/run.py --parts "$PARTS" --out "$OUT" --budget-s "$budget" ${PEERS_FLAGS:-}
echo "peers.sh: exit $? after $((SECONDS - START)) s"
