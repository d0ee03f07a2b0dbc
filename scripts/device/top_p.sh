#!/usr/bin/env bash
# On one GPU (tool `run`, carry [".whl"]): top-p by a threshold (PAGODA_SAMPLER_TOP_P=threshold) against the
# sort path.
#   1. the top-p and sampler gpu tests (the masks at 256 x 128256; the sampler's no-sync test);
#   2. benchmarks/top_p.py: masking time, sort against threshold, batch 1-256, peaked and flat rows;
#   3. profile_decode.py at batch 256, temperature 0.7 + top-p 0.9, with each mode;
# About 7 minutes. -> $OUT/summary.txt, $OUT/results.tgz
#   bash scripts/device/top_p.sh
source scripts/device/begin_cuda.sh top_p
timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/sampling/test_top_p_threshold.py \
  tests/sampling/test_sampler.py > "$R/tests.log" 2>&1
echo "gpu tests: exit $? ($(tail -1 "$R/tests.log"))" | tee "$OUT/summary.txt"
for mode in sort threshold; do
  PAGODA_SAMPLER_TOP_P=$mode timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/sampling/test_sampler.py \
    -k queues_without_waiting > "$R/nosync_$mode.log" 2>&1
  echo "no-sync test, $mode: exit $? ($(tail -1 "$R/nosync_$mode.log"))"
done | tee -a "$OUT/summary.txt"
timeout 120 python3 benchmarks/top_p.py --out "$R/top_p.json" 2>&1 | tee -a "$OUT/summary.txt"
for mode in sort threshold; do
  mkdir -p "$R/$mode"
  PAGODA_SAMPLER_TOP_P=$mode timeout 150 python3 scripts/device/profile_decode.py benchmarks/configs/llama-3.1-8b \
    --batch 256 --temperature 0.7 --top-p 0.9 --out "$R/$mode" > "$R/profile_$mode.log" 2>&1
  echo "profile batch 256 T=0.7 top-p 0.9, $mode: exit $?"
  python3 -c "import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[2], 'step', round(r['step_ms'], 2), \
'ms', json.dumps(r['decode_by_kind']['exclusive_by_kind_us']))" "$R/$mode/profile_tp1_b256_t0.7_p0.9.json" "$mode"
  rm -f "$R/$mode"/trace_*.json
done 2>&1 | tee -a "$OUT/summary.txt"
pack_results
