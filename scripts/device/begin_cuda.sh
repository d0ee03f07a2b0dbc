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

# One `pagoda bench latency` run of MODEL at tensor-parallel size TP with the caller's LAT flags and the
# assignments in ENV (a string, may be empty) into $R/NAME.json and .log; prints NAME, the exit status
# and the batch-1 step.
bench_latency() {  # NAME MODEL TP ENV
  env $4 timeout 150 pagoda bench latency "$2" "${LAT[@]}" -tp "$3" --result-file "$R/$1.json" > "$R/$1.log" 2>&1
  echo "$1: exit $? $(python3 scripts/device/summarize_bench.py "$R/$1.json" 2>/dev/null)"
}
