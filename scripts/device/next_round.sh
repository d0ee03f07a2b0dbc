#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]), branch h-next (h-dense-gemv + h-triton-pdl on main):
# GPU tests of the CUDA platform (the dense GEMV included) and of Triton attention (launched as
# programmatic dependents); benchmarks/dense_gemv.py against cuBLAS; the batch-1 decode step of dummy
# Llama-3.1-8B with PAGODA_PDL=0 / PDL / PDL + the GEMV off / PDL + the GEMV (128 new tokens, best of 4),
# and of dummy Llama-3.2-1B with the GEMV off and on; `pagoda serve` of dummy Llama-3.1-8B (SERVE=0
# skips). Results under $OUT. About 9 minutes.
#   bash scripts/device/next_round.sh
set -uo pipefail
OUT="${OUT:-$PWD/next_round_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

for suite in platform_cuda attention_triton; do
  timeout 120 python3 -m pytest -q -p no:cacheprovider "plugins/$suite/tests" > "$OUT/tests_$suite.log" 2>&1
  echo "tests $suite: exit $? ($(tail -1 "$OUT/tests_$suite.log"))"; grep -E "^(FAILED|ERROR)" "$OUT/tests_$suite.log" | head -10
done
timeout 120 python3 benchmarks/dense_gemv.py --out "$OUT/dense_gemv.json" > "$OUT/bench.log" 2>&1
echo "benchmark: exit $?"; grep -E "decoder layer|lm_head" "$OUT/bench.log"

COMMON=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
        --input-len 128 --output-len 128 --repeats 4 --log-level warning)
step() {  # step MODEL PDL GEMV
  PAGODA_PDL=$2 PAGODA_DENSE_GEMV=$3 timeout 90 pagoda bench latency "benchmarks/configs/$1" "${COMMON[@]}" \
    --result-file "$OUT/latency.json" > /dev/null 2>> "$OUT/latency.log"
  echo "batch-1 step $1 PAGODA_PDL=$2 PAGODA_DENSE_GEMV=$3: $(python3 -c "import json; print(round(json.load(open('$OUT/latency.json'))['steps'][0]['step_ms'], 3))") ms" \
    | tee -a "$OUT/latency.txt"
}
step llama-3.1-8b 0 0; step llama-3.1-8b 1 0; step llama-3.1-8b 1 1
step llama-3.2-1b 1 0; step llama-3.2-1b 1 1
if [[ "${SERVE:-1}" == 1 ]]; then
  source scripts/device/serve_bench.sh
  serve_bench triton serve_bf16
fi
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f -- *.log latency.json)
