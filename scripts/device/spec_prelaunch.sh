#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), branch h-chained-draft (issue 16): draft rounds queued behind
# the verify step.
#   1. gpu-marked tests: the speculative ones (the new ones compare every step's proposals with and without
#      the queued rounds on CUDA graphs) and the sampler's (a sampled step queued without a sync);
#   2. one speculative iteration (verify + round + host) against the decode step through the engine, 8B target,
#      1B draft, dummy, batch 1, k = 2 and 4, PAGODA_DRAFT_PRELAUNCH=1 and 0 alternated (spec_iteration.py);
#   3. spec_costs at batch 1.
# About 8 minutes. -> $OUT
#   bash scripts/device/spec_prelaunch.sh
set -uo pipefail
OUT="${OUT:-$PWD/spec_prelaunch_out}"; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS="${MAX_JOBS:-16}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
source scripts/device/fresh_install.sh plugins/platform_cuda plugins/attention_triton; echo "install: ${SECONDS} s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/device.txt"
timeout 180 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_speculative_prelaunch.py \
  tests/engine/test_speculative_draft_chain.py tests/engine/test_speculative_draft.py tests/sampling/test_sampler.py \
  > "$OUT/tests_spec.log" 2>&1
echo "spec gpu tests: exit $? ($(tail -1 "$OUT/tests_spec.log"))"; grep -E "^(FAILED|ERROR)" "$OUT/tests_spec.log" | head
for k in 2 4; do
  for prelaunch in 1 0 1 0; do
    dir="$OUT/k${k}_prelaunch${prelaunch}_$SECONDS"
    PAGODA_DRAFT_PRELAUNCH=$prelaunch timeout 100 python3 scripts/device/spec_iteration.py --k "$k" --out "$dir" \
      > "$dir.log" 2>&1
    echo "k=$k prelaunch=$prelaunch: exit $? $(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
print(f\"decode {r['decode_ms']:.3f} ms, iteration {r['iteration_ms']:.3f} ms ({r['iteration_over_decode']:.3f}), \
accepted {r['accepted']} of {r['drafts']}, {r['speedup']}\")" "$dir/spec_iteration.json" 2>/dev/null)"
  done
done | tee "$OUT/summary.txt"
mkdir -p "$OUT/costs"
timeout 170 python3 scripts/device/spec_costs.py --mode costs --batches 1 --attention-backend triton --out "$OUT/costs" \
  2>&1 | grep -v -E "Loading|Capturing|it/s\]" > "$OUT/costs/spec_costs.log"
echo "spec costs: exit $?"; grep -E "q=(1|3|5)  step|^  batch 1 k=(2|4):" "$OUT/costs/spec_costs.log"
(cd "$OUT" && tar czf logs.tgz -- *.log costs/*.log && rm -f -- *.log costs/*.log)
echo "total ${SECONDS} s"
