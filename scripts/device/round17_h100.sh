#!/usr/bin/env bash
# On one H100 (tool `run`, carry [".whl"]), issue 16's draft step and issue 15's TP=2 rank shapes:
#   1. gpu-marked tests: the sampler's no-sync step (every synchronising call listed), the split argmax,
#      the dense GEMV at every split, the queued draft rounds;
#   2. benchmarks/argmax.py (split argmax vs torch.argmax, rows 1-256) and benchmarks/dense_gemv.py at one
#      token with K split over 1, 2 and 4 warps (8B, 8B-as-a-TP=2-rank and 1B shapes);
#   3. spec_iteration.py (8B target, 1B draft, k = 2, batch 1), the GEMV's split rule against no split
#      (PAGODA_GEMV_SPLIT=1), alternated twice;
#   4. `pagoda serve` + `pagoda bench serve` on triton (500 x 256/256).
# At most 8 files come back: the logs and JSON go into one tarball. About 8 minutes. -> $OUT
#   bash scripts/device/round17_h100.sh
source scripts/device/begin_cuda.sh round17_h100
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/sampling/test_sampler.py tests/layers/test_argmax.py \
  plugins/platform_cuda/tests/test_dense_gemv.py tests/engine/test_speculative_prelaunch.py > "$R/tests.log" 2>&1
echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))"; grep -E "^(FAILED|ERROR)|synchronising calls|^E .*:[0-9]+$" "$R/tests.log" | head -20
timeout 60 python3 benchmarks/argmax.py --out "$R/argmax.json" 2>&1 | tee "$R/argmax.log" | grep rows
timeout 200 python3 benchmarks/dense_gemv.py --tokens 1 --out "$R/dense_gemv.json" > "$R/dense_gemv.log" 2>&1
echo "dense gemv: exit $?"; grep -vE "^copy" "$R/dense_gemv.log" | tail -40
for pair in 1 2; do
  for split in 0 1; do
    dir="$R/k2_split${split}_p$pair"
    PAGODA_GEMV_SPLIT=$([ "$split" = 1 ] && echo 1 || echo "") timeout 100 python3 scripts/device/spec_iteration.py \
      --k 2 --out "$dir" > "$dir.log" 2>&1
    echo "k=2 $([ "$split" = 1 ] && echo "no split" || echo "split rule"): exit $? $(python3 -c "import json, sys; \
r = json.load(open(sys.argv[1])); print(f\"decode {r['decode_ms']:.3f} ms, iteration {r['iteration_ms']:.3f} ms \
({r['iteration_over_decode']:.3f}), S(3) {r['speedup']['S(3)']:.3f}\")" "$dir/spec_iteration.json" 2>/dev/null)"
  done
done | tee "$OUT/summary.txt"
source scripts/device/serve_bench.sh
OUT="$R" serve_bench triton serve_triton | tee -a "$OUT/summary.txt"
pack_results
