#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), branch h-next, in two calls to one warm machine:
#   PHASE=a bash scripts/device/round15.sh   # build with flash; GPU tests of platform_cuda and attention_triton
#                                            # (dense GEMV, Triton PDL); dense_gemv.py vs cuBLAS; batch-1 steps of
#                                            # dummy Llama-3.1-8B and Llama-3.2-1B with the GEMV off and on (~8 min)
#   PHASE=b bash scripts/device/round15.sh   # (reuses /tmp/site) speculative costs + their gpu tests; flash vs
#                                            # triton end to end (300 x 1024/128); pagoda serve with flash (~7 min)
# Results under $OUT.
set -uo pipefail
OUT="${OUT:-$PWD/round15_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
PLUGINS=(plugins/platform_cuda plugins/attention_triton plugins/attention_flash)
if [[ "${PHASE:-a}" == b && -d /tmp/site/pagoda_attention_flash ]]; then
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PATH="/tmp/site/bin:$PATH"; echo "install: reused"
else
  source scripts/device/fresh_install.sh "${PLUGINS[@]}"; echo "install: ${SECONDS} s"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

phase_a() {
  for suite in platform_cuda attention_triton; do
    timeout 150 python3 -m pytest -q -p no:cacheprovider "plugins/$suite/tests" > "$OUT/tests_$suite.log" 2>&1
    echo "tests $suite: exit $? ($(tail -1 "$OUT/tests_$suite.log"))"; grep -E "^(FAILED|ERROR)" "$OUT/tests_$suite.log" | head -10
  done
  timeout 120 python3 benchmarks/dense_gemv.py --out "$OUT/dense_gemv.json" > "$OUT/bench.log" 2>&1
  echo "dense gemv benchmark: exit $?"; grep -E "decoder layer|lm_head" "$OUT/bench.log"
  local common=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
                --input-len 128 --output-len 128 --repeats 4 --log-level warning)
  for model in llama-3.1-8b llama-3.2-1b; do
    for gemv in 0 1; do
      PAGODA_DENSE_GEMV=$gemv timeout 90 pagoda bench latency "benchmarks/configs/$model" "${common[@]}" \
        --result-file "$OUT/latency_${model}_gemv$gemv.json" > /dev/null 2>> "$OUT/latency.log"
      echo "batch-1 step $model PAGODA_DENSE_GEMV=$gemv: $(python3 -c "import json, sys
print(round(json.load(open(sys.argv[1]))['steps'][0]['step_ms'], 3))" "$OUT/latency_${model}_gemv$gemv.json") ms"
    done
  done
}

phase_b() {
  timeout 120 python3 -m pytest -q -p no:cacheprovider -rs -m gpu tests/engine/test_speculative_draft_chain.py \
    tests/engine/test_speculative_draft.py > "$OUT/spec_gpu_tests.log" 2>&1
  echo "spec gpu tests: exit $? ($(tail -1 "$OUT/spec_gpu_tests.log"))"
  timeout 200 python3 scripts/device/spec_costs.py --mode costs --attention-backend triton --out "$OUT" 2>&1 \
    | grep -v -E "Loading|Capturing|it/s\]" > "$OUT/spec_costs.log"
  echo "spec costs: exit $?"; grep -E "^  batch 1 k=(2|3)" "$OUT/spec_costs.log"
  for backend in flash triton; do
    timeout 120 pagoda bench throughput benchmarks/configs/llama-3.1-8b --load-format dummy --attention-backend "$backend" \
      --max-model-len 2048 --num-prompts 300 --input-len 1024 --output-len 128 --log-level warning \
      --result-file "$OUT/throughput_$backend.json" > "$OUT/throughput_$backend.log" 2>&1
    echo "throughput $backend: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/throughput_$backend.json" 2>/dev/null)"
  done
  source scripts/device/serve_bench.sh
  serve_bench flash serve_flash
}

"phase_${PHASE:-a}"
(cd "$OUT" && tar czf "logs_${PHASE:-a}.tgz" -- *.log && rm -f -- *.log)
echo "total ${SECONDS} s"
