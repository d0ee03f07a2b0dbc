#!/usr/bin/env bash
# On nvidia-h200-x2 (tool `run`, carry [".whl", ".ab"]), issue 15: an A/B of a change to the LL
# kernels on one machine: this tree's build against the baseline build of .ab (scripts/device/ab_base.sh:
# .ab holds the baseline's versions of the changed csrc files, same relative paths):
#   1. the LL GPU tests (sums and the fused norm against NCCL, TP=2 tokens equal to TP=1);
#   2. `pagoda bench latency` Llama-3.1-8B dummy bf16, batch 1: PAIRS (default 3) rounds of
#      TP=2 base, TP=2 new, TP=1 (TP=1 runs no LL kernel);
#   3. profile_decode.py at TP=2 (new): exclusive time by kind.
# About 9 minutes. -> $OUT/summary.txt and $OUT/results.tgz
#   bash scripts/device/ll_ab.sh
set -uo pipefail
OUT="${OUT:-$PWD/ll_ab_out}"; R="$OUT/r"; mkdir -p "$R"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton; echo "install: ${SECONDS} s"
source scripts/device/ab_base.sh .ab; echo "baseline build: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$R/device.txt"
T=tests/engine/test_tensor_parallel.py
timeout 200 python3 -m pytest -q -p no:cacheprovider "$T::test_symmetric_all_reduce_sums_like_nccl_on_two_gpus[ll]" \
  "$T::test_tp2_on_two_gpus_with_graphs_equals_tp1[ll]" > "$R/tests.log" 2>&1
echo "LL GPU tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
M8=benchmarks/configs/llama-3.1-8b
LAT=(--batch-sizes 1 --input-len 128 --output-len 128 --repeats 2 --load-format dummy --attention-backend triton
     --max-model-len 2048 --log-level warning)
latency() {  # name, tp, PYTHONPATH
  PYTHONPATH=$3 timeout 150 pagoda bench latency "$M8" "${LAT[@]}" -tp "$2" --result-file "$R/$1.json" > "$R/$1.log" 2>&1
  echo "$1: exit $? $(python3 scripts/device/summarize_bench.py "$R/$1.json" 2>/dev/null)"
}
for pair in $(seq "${PAIRS:-3}"); do
  latency "p${pair}_tp2_base" 2 "$BASE_PYTHONPATH"
  latency "p${pair}_tp2_new" 2 "$PYTHONPATH"
  latency "p${pair}_tp1" 1 "$PYTHONPATH"
done | tee -a "$OUT/summary.txt"
timeout 100 python3 scripts/device/profile_decode.py "$M8" -tp 2 --out "$R" > "$R/profile_tp2.log" 2>&1
echo "profile tp=2 (new): exit $?"; python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
k = r['decode_by_kind']; print(r['step_ms'], 'busy', k['busy_us'], 'idle', k['idle_us'], 'exclusive', \
json.dumps(k['exclusive_by_kind_us']))" "$R/profile_tp2_b1.json" 2>&1 | tee -a "$OUT/summary.txt"
gzip -f "$R"/trace_*.json 2>/dev/null
(cd "$OUT" && tar czf results.tgz r && rm -rf r)
echo "total ${SECONDS} s"
