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

# The GPU tests named (pytest node ids), unless TESTS=0: the log appended to $R/tests.log, the outcome and
# any failures in the summary. A -k applies to every node id of the call: give other tests a call of their own.
run_tests() {  # NODE_ID...
  [ "${TESTS:-1}" = 1 ] || return 0
  timeout 240 python3 -m pytest -q -p no:cacheprovider "$@" >> "$R/tests.log" 2>&1
  echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))" | tee -a "$OUT/summary.txt"
  grep -E "^(FAILED|ERROR)" "$R/tests.log" | head | tee -a "$OUT/summary.txt"
}

M8=benchmarks/configs/llama-3.1-8b M1=benchmarks/configs/llama-3.2-1b
# bench_latency's flags: the batch-1 decode step (a script may set its own after sourcing this file).
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level warning)

# One `pagoda bench latency` run of MODEL at tensor-parallel size TP with the caller's LAT flags and the
# assignments in ENV (a string, may be empty) into $R/NAME.json and .log; prints NAME, the exit status
# and the batch-1 step.
bench_latency() {  # NAME MODEL TP ENV
  env $4 timeout 150 pagoda bench latency "$2" "${LAT[@]}" -tp "$3" --result-file "$R/$1.json" > "$R/$1.log" 2>&1
  echo "$1: exit $? $(python3 scripts/device/summarize_bench.py "$R/$1.json" 2>/dev/null)"
}

# An A/B of switches on the 8B: PAIRS rounds of bench_latency, TP=2 with each arm of TP2_ARMS, then TP=1 with
# each of TP1_ARMS (keys of the caller's associative array ARM: arm -> environment assignments), into the
# summary.
ab_latency() {  # PAIRS "TP2_ARMS" "TP1_ARMS"
  for pair in $(seq "$1"); do
    for arm in $2; do bench_latency "latency_p${pair}_tp2_$arm" "$M8" 2 "${ARM[$arm]}"; done
    for arm in $3; do bench_latency "latency_p${pair}_tp1_$arm" "$M8" 1 "${ARM[$arm]}"; done
  done | tee -a "$OUT/summary.txt"
}

# rank_waits.py at TP=2 (or TP) under ARM's arm ARM_NAME: each rank's kernel table and its sums' waits into
# the summary, the traces under $R/ARM_NAME (at another TP, $R/tpTP_ARM_NAME).
rank_waits_arm() {  # ARM_NAME [TP]
  local name=$1 tp=${2:-2}
  [ "$tp" = 2 ] || name="tp${tp}_$1"
  env ${ARM[$1]} timeout 150 python3 scripts/device/rank_waits.py "$M8" -tp "$tp" --out "$R/$name" > "$R/rank_waits_$name.txt" 2>&1
  echo "rank_waits $name: exit $?" | tee -a "$OUT/summary.txt"
  awk '/^rank/ {n = 12} n > 0 {print; n--; next} /^sums after/' "$R/rank_waits_$name.txt" | tee -a "$OUT/summary.txt"
}
