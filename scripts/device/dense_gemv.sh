#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): the csrc dense GEMV (CudaOps.linear for 1-4 tokens).
# Its GPU tests and the CUDA platform's (engine, graphs); benchmarks/dense_gemv.py against cuBLAS at
# Llama-3.1-8B and Llama-3.2-1B shapes (then at one token with 1 and 2 rows per warp forced); the
# batch-1 decode step of dummy Llama-3.1-8B and Llama-3.2-1B with PAGODA_DENSE_GEMV=0 and =1 (128 new
# tokens, best of 4; ROUNDS=2 repeats the pair); `pagoda serve` of dummy Llama-3.1-8B (SERVE=0 skips).
# Results under $OUT. About 9.5 minutes: the run tool's limit is 10.
#   bash scripts/device/dense_gemv.sh
set -uo pipefail
OUT="${OUT:-$PWD/dense_gemv_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

timeout 120 python3 -m pytest -q -p no:cacheprovider plugins/platform_cuda/tests > "$OUT/tests.log" 2>&1
echo "tests platform_cuda: exit $? ($(tail -1 "$OUT/tests.log"))"; grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -10

timeout 120 python3 benchmarks/dense_gemv.py --out "$OUT/dense_gemv.json" > "$OUT/bench.log" 2>&1
echo "benchmark: exit $?"; cat "$OUT/bench.log"
for rows in 1 2; do  # rows per warp forced (the kernel picks 2 from 16384 rows on)
  PAGODA_GEMV_ROWS=$rows timeout 120 python3 benchmarks/dense_gemv.py --tokens 1 > "$OUT/bench_rows$rows.log" 2>&1
  echo "benchmark, PAGODA_GEMV_ROWS=$rows: exit $?"; grep -E "decoder layer|lm_head" "$OUT/bench_rows$rows.log"
done

COMMON=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
        --input-len 128 --output-len 128 --repeats 4 --log-level warning)
for model in llama-3.1-8b llama-3.2-1b; do
  for gemv in $(for _ in $(seq "${ROUNDS:-1}"); do echo 0 1; done); do
    PAGODA_DENSE_GEMV=$gemv timeout 90 pagoda bench latency benchmarks/configs/$model "${COMMON[@]}" \
      --result-file "$OUT/latency.json" > /dev/null 2>> "$OUT/latency.log"
    echo "batch-1 step $model PAGODA_DENSE_GEMV=$gemv: $(python3 -c "import json; print(round(json.load(open('$OUT/latency.json'))['steps'][0]['step_ms'], 3))") ms" \
      | tee -a "$OUT/latency.txt"
  done
done
if [[ "${SERVE:-1}" == 1 ]]; then
  source scripts/device/serve_bench.sh
  serve_bench triton serve_bf16
fi
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f -- *.log latency.json)
