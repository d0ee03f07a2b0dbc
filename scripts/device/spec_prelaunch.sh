#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), branch h-chained-draft (issue 16): draft rounds queued behind
# the verify step, and sampled steps without a stream sync (main, 5b92618).
#   1. gpu-marked tests: the speculative ones (the new ones compare every step's proposals with and without
#      the queued rounds on CUDA graphs) and the sampler's (a sampled step queued without a sync);
#   2. one speculative iteration (verify + round + host) against the decode step through the engine, 8B target,
#      1B draft, dummy, batch 1, k = 2, PAGODA_DRAFT_PRELAUNCH=1 and 0 alternated (spec_iteration.py);
#   3. `pagoda bench throughput` 1000 x 256/256, greedy and sampled (temperature 0.7, top-p 0.9): with the
#      syncs gone, sampling should cost about what greedy does.
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
for prelaunch in 1 0 1 0; do
  dir="$OUT/k2_prelaunch${prelaunch}_$SECONDS"
  PAGODA_DRAFT_PRELAUNCH=$prelaunch timeout 100 python3 scripts/device/spec_iteration.py --k 2 --out "$dir" > "$dir.log" 2>&1
  echo "k=2 prelaunch=$prelaunch: exit $? $(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
print(f\"decode {r['decode_ms']:.3f} ms, iteration {r['iteration_ms']:.3f} ms ({r['iteration_over_decode']:.3f}), \
accepted {r['accepted']} of {r['drafts']}, {r['speedup']}\")" "$dir/spec_iteration.json" 2>/dev/null)"
done | tee "$OUT/summary.txt"
M8=benchmarks/configs/llama-3.1-8b
for sampling in "" "--temperature 0.7 --top-p 0.9"; do
  name=throughput_$([ -z "$sampling" ] && echo greedy || echo sampled)
  # shellcheck disable=SC2086
  timeout 150 pagoda bench throughput "$M8" --load-format dummy --attention-backend triton --max-model-len 2048 \
    --num-prompts 1000 --input-len 256 --output-len 256 $sampling --result-file "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(python3 scripts/device/summarize_bench.py "$OUT/$name.json" 2>/dev/null)"
done | tee -a "$OUT/summary.txt"
(cd "$OUT" && tar czf logs.tgz -- *.log && rm -f -- *.log)
echo "total ${SECONDS} s"
