#!/usr/bin/env bash
# On the GPU machine (tool `run`, carry [".whl"]): programmatic dependent launch (PDL) on and off in one
# build. GPU tests of the CUDA platform's kernels and graphs, of AWQ and of flash decode (PDL on); the
# batch-1 decode step of dummy Llama-3.1-8B, bf16 and AWQ, with PAGODA_PDL=0 and with PDL (128 new
# tokens, best of 4; ROUNDS=2 repeats the four); `pagoda serve` of the dummy AWQ model.
# Results under $OUT, a summary at the end. About 8 minutes.
#   bash scripts/device/pdl_ab.sh
set -uo pipefail
OUT="${OUT:-$PWD/pdl_ab_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton plugins/attention_flash plugins/quant_awq
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"

gpu_tests() {  # gpu_tests NAME PATH...
  local name=$1; shift
  timeout 150 python3 -m pytest -q -p no:cacheprovider "$@" > "$OUT/tests_$name.log" 2>&1
  echo "tests $name: exit $? ($(tail -1 "$OUT/tests_$name.log"))"
  grep -E "^(FAILED|ERROR)" "$OUT/tests_$name.log" | head -10
}
gpu_tests platform_cuda plugins/platform_cuda/tests

COMMON=(--load-format dummy --attention-backend triton --max-model-len 1024 --max-num-seqs 8 --batch-sizes 1
        --input-len 128 --output-len 128 --repeats 4 --log-level warning)
for round in $(seq "${ROUNDS:-1}"); do
  for model in llama-3.1-8b llama-3.1-8b-awq; do
    for pdl in 0 1; do
      PAGODA_PDL=$pdl timeout 90 pagoda bench latency benchmarks/configs/$model "${COMMON[@]}" \
        --result-file "$OUT/latency_${model}_pdl${pdl}_$round.json" > /dev/null 2>> "$OUT/latency.log"
    done
  done
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
for model in ("llama-3.1-8b", "llama-3.1-8b-awq"):
    for pdl in (0, 1):
        steps = []
        for f in sorted(out.glob(f"latency_{model}_pdl{pdl}_*.json")):
            steps.append(json.loads(f.read_text())["steps"][0]["step_ms"])
        print(f"batch-1 step {model:18s} PAGODA_PDL={pdl}: " + ", ".join(f"{s:.3f}" for s in steps) + " ms")
PY
gpu_tests quant_awq plugins/quant_awq/tests
if [[ "${SERVE:-1}" == 1 ]]; then
  source scripts/device/serve_bench.sh
  serve_bench triton serve_awq benchmarks/configs/llama-3.1-8b-awq
fi
gpu_tests flash plugins/attention_flash/tests/test_flash_gpu_kernels.py
(cd "$OUT" && tar czf logs.tgz -- *.log latency_*.json && rm -f -- *.log latency_*.json)
