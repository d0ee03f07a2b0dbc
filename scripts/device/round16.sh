#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), branch h-short-queries: the Triton GPU tests (verify-sized
# queries on the decode kernel among them); speculative decoding's costs at batch 1 with the short-query
# path and without it (PAGODA_TRITON_SHORT_QUERIES=0: the prefill kernel), the spec GPU tests and a
# profile of the 1B draft's rounds; `pagoda serve` on triton. Results under $OUT. About 9 minutes.
#   bash scripts/device/round16.sh
set -uo pipefail
OUT="${OUT:-$PWD/round16_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton; echo "install: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu plugins/attention_triton/tests > "$OUT/tests_triton.log" 2>&1
echo "triton gpu tests: exit $? ($(tail -1 "$OUT/tests_triton.log"))"; grep -E "^(FAILED|ERROR)" "$OUT/tests_triton.log" | head
timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_speculative_draft_chain.py \
  tests/engine/test_speculative_draft.py > "$OUT/tests_spec.log" 2>&1
echo "spec gpu tests: exit $? ($(tail -1 "$OUT/tests_spec.log"))"
for short in 1 0; do
  mkdir -p "$OUT/short$short"
  PAGODA_TRITON_SHORT_QUERIES=$short timeout 170 python3 scripts/device/spec_costs.py --mode costs --batches 1 \
    --attention-backend triton --out "$OUT/short$short" 2>&1 | grep -v -E "Loading|Capturing|it/s\]" > "$OUT/short$short/spec_costs.log"
  echo "spec costs, PAGODA_TRITON_SHORT_QUERIES=$short: exit $?"; grep -E "q=(1|3|5)  step|^  batch 1 k=(2|4):" "$OUT/short$short/spec_costs.log"
done
timeout 120 python3 scripts/device/profile_draft_round.py --attention-backend triton --out "$OUT" 2>&1 \
  | grep -v -E "Loading|Capturing|it/s\]" > "$OUT/draft_round.log"
echo "draft round profile: exit $?"; head -14 "$OUT/draft_round.log"
source scripts/device/serve_bench.sh
serve_bench triton serve_triton
(cd "$OUT" && tar czf logs.tgz -- *.log short*/*.log && rm -f -- *.log short*/*.log)
echo "total ${SECONDS} s"
