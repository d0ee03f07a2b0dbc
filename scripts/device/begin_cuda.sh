# Sourced first by one-GPU device scripts, from the repo root: OUT (default $PWD/NAME_out) and R=$OUT/r
# for the logs and JSON (pack_results packs R into $OUT/results.tgz at the end: at most 8 files come
# back), the usual exports, a fresh build of pagoda with platform_cuda and attention_triton, and the
# device's name in $OUT/device.txt. EXTRA_PLUGINS (e.g. plugins/attention_flash) are built too.
#   source scripts/device/begin_cuda.sh NAME
set -uo pipefail
OUT="${OUT:-$PWD/$1_out}"; R="$OUT/r"; mkdir -p "$R"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton ${EXTRA_PLUGINS:-}; echo "install: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

pack_results() {
  (cd "$OUT" && tar czf results.tgz r && rm -rf r)
  echo "total ${SECONDS} s"
}
