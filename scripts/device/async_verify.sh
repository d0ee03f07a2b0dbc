#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), branch h-async-verify (issue 16): verify steps that take the
# drafts of the round queued behind the verify step before it, on the device, unread.
#   1. gpu-marked tests: the speculative ones (queued rounds on CUDA graphs: proposals equal to rounds after
#      the read, drafts taken unread), the split argmax;
#   2. spec_iteration.py (8B target, 1B draft, dummy, batch 1, k = 2): PAGODA_DRAFTS_ON_DEVICE=1 / 0
#      alternated twice (0: the round is read before the next verify step is scheduled, as before);
#   3. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256).
# Logs and JSON in one tarball (8 files at most come back). About 6 minutes. -> $OUT
#   bash scripts/device/async_verify.sh              (SKIP_TESTS=1: no tests; PAIRS=N: N pairs, default 2)
source scripts/device/begin_cuda.sh async_verify
if [ -z "${SKIP_TESTS:-}" ]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_speculative_prelaunch.py \
    tests/engine/test_speculative_draft_chain.py tests/engine/test_speculative_draft.py tests/layers/test_argmax.py \
    > "$R/tests.log" 2>&1
  echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))"; grep -E "^(FAILED|ERROR)" "$R/tests.log" | head
fi
for pair in $(seq "${PAIRS:-2}"); do
  for on_device in 1 0; do
    dir="$R/k2_on_device${on_device}_p$pair"
    PAGODA_DRAFTS_ON_DEVICE=$on_device timeout 100 python3 scripts/device/spec_iteration.py --k 2 --out "$dir" \
      > "$dir.log" 2>&1
    echo "k=2 drafts on device=$on_device: exit $? $(python3 -c "import json, sys; r = json.load(open(sys.argv[1])); \
print(f\"decode {r['decode_ms']:.3f} ms, iteration {r['iteration_ms']:.3f} ms ({r['iteration_over_decode']:.3f}), \
S(2) {r['speedup']['S(2)']:.3f}, S(3) {r['speedup']['S(3)']:.3f}\")" "$dir/spec_iteration.json" 2>/dev/null)"
  done
done | tee "$OUT/summary.txt"
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
pack_results
