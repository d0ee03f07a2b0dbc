#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): the AWQ linear benchmark of this tree (A) and of
# a variant (B) in one run, so that the two share a card and a bf16 peer. The variant is the folder
# ab_variant/ (untracked, not committed), which holds replacements at their repo paths, e.g.
#   mkdir -p ab_variant/csrc/kernels && git show BRANCH:csrc/kernels/awq_tiles.cu > ab_variant/csrc/kernels/awq_tiles.cu
# A is timed, B overlaid and pagoda-platform-cuda rebuilt, B tested (TESTS=0 skips) and timed; AGAIN=1
# then times A again (how much the card drifted). DTYPES (default "bfloat16") lists the
# activation dtypes timed; TOKENS (default 1,8,16) the token counts. About 6 minutes (AGAIN=1: 8).
#   bash scripts/device/awq_ab.sh
set -uo pipefail
OUT="${OUT:-$PWD/awq_ab_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
[[ -d ab_variant ]] || { echo "no ab_variant/ folder: nothing to compare"; exit 2; }
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton plugins/quant_awq
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

bench() {  # bench LABEL: the tiles kernel and the dense peer, per dtype
  local dtype
  for dtype in ${DTYPES:-bfloat16}; do
    timeout 120 python3 benchmarks/quant_awq.py --kernels tiles --tokens "${TOKENS:-1,8,16}" --dtype "$dtype" \
      --out "$OUT/$1_$dtype.json" > "$OUT/$1_$dtype.log" 2>&1
    echo "$1 $dtype: exit $? | $(grep -E '^decoder layer' "$OUT/$1_$dtype.log")"
  done
}
bench A1
mkdir -p /tmp/a && cp -r --parents csrc plugins /tmp/a/  # A's sources, restored at the end
cp -r ab_variant/. .
rm -rf plugins/*/build plugins/*/*.egg-info
timeout 200 bash -c "source scripts/device/install_wheels.sh plugins/platform_cuda" > "$OUT/install_b.log" 2>&1 \
  || { tail -30 "$OUT/install_b.log"; exit 1; }
if [[ "${TESTS:-1}" == 1 ]]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider -rs plugins/quant_awq/tests > "$OUT/tests_b.log" 2>&1
  echo "B tests: exit $? ($(tail -1 "$OUT/tests_b.log"))"
  grep -E "^(FAILED|ERROR)" "$OUT/tests_b.log" | head -20
fi
bench B
if [[ "${AGAIN:-0}" == 1 ]]; then
  cp -r /tmp/a/. . && rm -rf plugins/*/build plugins/*/*.egg-info
  timeout 200 bash -c "source scripts/device/install_wheels.sh plugins/platform_cuda" > "$OUT/install_a.log" 2>&1 \
    || { tail -30 "$OUT/install_a.log"; exit 1; }
  bench A2
fi
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f install*.log)
